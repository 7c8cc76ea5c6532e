"""Certify a cell the way modeld certifies one (issue 50): the four step-function gates, benchmark integrity, the
certification matrix and the product path as it stands.

The sources are contenox/runtime at ``2bfdc1f5`` (``docs/development/blueprints/modeld/effective-context/``:
``specialization-cells-blueprint.md``, ``benchmark-integrity-blueprint.md``; ``modeld/alternative-silicon.md``) and
contenox/contenox v1.0.0 at ``2f653670`` (``internal/models/modelrepo/vllm/``, ``internal/models/backendservice/``).

- :mod:`.classes`: the four result classes, a leaf every finding writer reads;
- :mod:`.integrity`: the rules for publishing a number (result class, p50/p90/p95 over repeated runs, the same-model
  rule, the warm-state rule, stage times, the quality smoke's status);
- :mod:`.gates`: the four gates' rules, each a pure function of rows (G4 is the loop's gate, :mod:`workbench.loop.gate`);
- :mod:`.long_context`: G1–G3 measured on real engines (the ``gates`` source of findings);
- :mod:`.quality`: the quality smoke (A2: warm suffix output equals the cold full prompt; a small task set);
- :mod:`.matrix`: the certification matrix per cell (report section, JSON and CSV, the blueprint's table);
- :mod:`.product`: the product path as it stands (contenox v1.0.0 retired modeld);
- :mod:`.writeback`: the blueprint's managed blocks of this package;
- :mod:`.cli`: ``workbench certify``.

Nothing here is imported by ``import workbench``; the package imports no engine.
"""
