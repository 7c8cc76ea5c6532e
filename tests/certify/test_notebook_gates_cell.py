"""Notebook 60's gates cell as committed, run where the gates write a finding (the TensorRT-LLM lane: a not-run
finding with the GPU command), so its figure call is the one the notebook makes. The reviewer's construction (review
of issue 50, item 1): `workbench run --engine trtllm --only 60_agentic_loop` failed with "TypeError: cannot unpack
non-iterable SideBySide object" in this cell; nbval runs the notebook on llama.cpp, where the gates do not run."""

from __future__ import annotations

import json
from pathlib import Path

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "60_agentic_loop.ipynb"


def _cells(marker: str) -> list[str]:
    nb = json.loads(NOTEBOOK.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code" and marker in "".join(c["source"])]


def test_the_gates_cell_runs_where_the_gates_write_a_finding(tmp_path, capsys):
    (params,) = _cells("gates_model = ")
    (cell,) = _cells("long_context.run_in_child(plan, out)")
    shown: list = []
    space: dict = {"display": shown.append}
    exec(params, space)  # the notebook's own defaults, then the lane's parameters as the runner passes them
    space |= {"engine": "trtllm", "out": str(tmp_path), "quality": False}
    exec("from workbench import loop, plots, widgets", space)
    exec(cell, space)
    gated = space["gated"]
    assert gated is not None and gated.verdict == "not-run" and "workbench certify gates --engine trtllm" in gated.reason
    assert "Not run on trtllm" in capsys.readouterr().out
