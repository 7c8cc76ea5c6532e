"""Probe tests: real llama.cpp on the tiny synthetic model; faults are injected through llama.cpp's own API."""

from __future__ import annotations

import json

import pytest

from workbench import findings, probes

TINY = "synthetic:tiny"


@pytest.fixture
def run_probe(tmp_path):
    """Run a probe on the real llama.cpp cell; check that what was written is schema-valid."""

    def run(name: str, **params):
        static = not probes.get(name).needs_engine
        f = probes.run(name, engine="llamacpp", model=probes.models.DEFAULT_MODEL if static else TINY,
                       params=params, out=tmp_path)
        doc = json.loads((tmp_path / f"{f.id}.json").read_text())
        findings.validate(doc)
        assert doc["environment"]["engine_version"] and doc["probe_version"] == probes.get(name).version
        return f

    return run


@pytest.fixture
def llama_api():
    """llama_cpp's module, for injecting faults through the engine's own C API."""
    import llama_cpp

    return llama_cpp
