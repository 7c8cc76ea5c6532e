"""The cache-aware gateway's shapes (seed 001) as experiments on real engines."""
