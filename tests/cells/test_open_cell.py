"""open_cell checks the observers a cell announces against their Protocols, once per class, at open."""

from __future__ import annotations

import pytest

from workbench import cells
from workbench.cells.llamacpp import LlamaCppCell

CLOSED: list[str] = []


class DriftedCell(LlamaCppCell):
    """llama.cpp's cell with a kv_readback method whose parameters drifted from the Protocol's."""

    def resident_tokens(self, slot: int = 0) -> int:  # the spec's slot is keyword-only
        return super().resident_tokens(slot=slot)

    def close(self) -> None:
        CLOSED.append("closed")
        super().close()


def _register(monkeypatch, cls) -> None:
    monkeypatch.setitem(cells.ENGINES._targets, "drifted", f"{__name__}:{cls.__name__}")
    monkeypatch.setitem(cells.ENGINES._loaded, "drifted", cls)


def test_a_cell_announcing_a_drifted_observer_fails_at_open_and_is_closed(monkeypatch):
    _register(monkeypatch, DriftedCell)
    CLOSED.clear()
    with pytest.raises(TypeError, match=r"kv_readback: resident_tokens\(slot=0\) differs from the spec"):
        cells.open_cell("drifted", "synthetic:tiny")
    assert CLOSED == ["closed"]  # nothing the workbench started is left open


def test_a_sound_cell_is_checked_once_per_class_and_announced_set(monkeypatch):
    seen = []
    real = cells.observer_mismatches
    monkeypatch.setattr(cells, "observer_mismatches", lambda cell, names: seen.append(names) or real(cell, names))
    monkeypatch.setattr(cells, "_CHECKED", set())
    for _ in range(2):
        with cells.open_cell("llamacpp", "synthetic:tiny"):
            pass
    assert len(seen) == 1 and "kv_readback" in seen[0]


def test_a_cell_announces_only_the_observers_that_are_on():
    """llama.cpp has no KV connector: a cell neither announces one nor offers to switch one on, and asking for
    it fails at open with what to do instead (the vLLM and TensorRT-LLM cells: tests/cells/test_vllm.py,
    test_trtllm.py)."""
    with cells.open_cell("llamacpp", "synthetic:tiny") as cell:
        d = cell.describe()
    assert "connector" not in d.observers and not d.offers("connector") and dict(d.switchable) == {}
    assert cells.observer_mismatches(cell, d.observers) == []
    with pytest.raises(ValueError, match="no KV connector"):
        cells.open_cell("llamacpp", "synthetic:tiny", connector=True)


def test_a_model_format_an_engine_never_runs_is_refused_before_the_engine_is_imported():
    """The loop's llama.cpp pass offers its GGUF model to every arm: vLLM's arms refuse it by its format alone,
    without importing vllm (seconds) to say so. Run in a fresh process, where nothing imported vllm yet."""
    import json
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import json, sys
        from workbench import cells, models
        from workbench.engine import UnsupportedFeature
        gguf = str(models.resolve("synthetic:tiny").path)
        hf = str(models.hf_directory(models.resolve("synthetic:tiny")))
        said = {}
        for engine, spec in (("vllm", gguf), ("vllm-server", gguf), ("trtllm-serve", gguf), ("llamacpp-server", hf)):
            try:
                cells.cell_class(engine).open(spec)
            except UnsupportedFeature as e:
                said[engine] = str(e)
        print(json.dumps({"said": said, "vllm imported": "vllm" in sys.modules}))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.splitlines()[-1])
    assert not got["vllm imported"]
    assert "Hugging Face directories" in got["said"]["vllm"] and "Hugging Face directories" in got["said"]["vllm-server"]
    assert "Hugging Face directories" in got["said"]["trtllm-serve"] and "GGUF files" in got["said"]["llamacpp-server"]
