"""The gateway's shapes as experiments on a pool of real engines: the pool (:mod:`.pool`), the router a
cache-aware gateway runs (:mod:`.router`: fullproxy and KV-exact) and the workload that measures them
(:mod:`.workload`). Engines are reached through the registry and their wings, never named here."""
