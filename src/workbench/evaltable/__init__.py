"""Seed 004's eval-backend table: throughput and TTFT per served backend under load, measured with NVIDIA's
AIPerf (issue 39). One module per concern: :mod:`.tokenizer` (the local tokenizer folder AIPerf sizes prompts
with, checked against the server), :mod:`.aiperf` (one ``aiperf profile`` run per cell, in its own environment),
:mod:`.exports` (reading its exports), :mod:`.backends` (which servers, how each is recognised, why others are
not run), :mod:`.table` (the table, JSON and Markdown) and :mod:`.run` (``workbench evaltable``)."""
