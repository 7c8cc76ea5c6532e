"""The cache-aware gateway's shapes (seed 001) as experiments on real engines: the pool (:mod:`.pool`), the router
a cache-aware gateway runs (:mod:`.router`: fullproxy and KV-exact), the workload that measures them
(:mod:`.workload`), and the sequential prefill/decode relay (:mod:`.pd`). Engines are reached through the registry
and their wings, never named here."""
