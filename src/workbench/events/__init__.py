"""The KV event plane as a cache-aware gateway consumes it: event sources behind one interface, sequence
gaps, an inventory that predicts reuse, client-side block hashes, and one consumer per endpoint (a lease).

See docs/events.md. Engines are imported only inside the sources that need them."""
