"""Importing the package never imports an engine (lazy registries)."""

from __future__ import annotations

import subprocess
import sys


def test_import_workbench_imports_no_engine():
    code = ("import sys, workbench, workbench.probes, workbench.findings, workbench.cli, workbench.doctor;"
            "import workbench.cells;"
            "bad = [m for m in ('llama_cpp', 'tensorrt_llm', 'vllm', 'torch') if m in sys.modules];"
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_unknown_engine_lists_the_valid_ones():
    import pytest

    from workbench import cells

    with pytest.raises(ValueError, match="valid engines: llamacpp, trtllm, vllm"):
        cells.open_cell("sglang", "synthetic:tiny")
