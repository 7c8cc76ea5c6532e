"""The findings store: schema validation, atomic never-overwriting writes, tolerant loading."""

from __future__ import annotations

import json

import pytest

from workbench import findings
from workbench.environment import fingerprint


def make(probe="reuse.per_request_metrics", engine="llamacpp", verdict="confirmed", version="0.3.36", **kw):
    env = fingerprint(engine, version)
    return findings.Finding(probe=probe, claim="c", claims=["unknown.reuse_metrics"], verdict=verdict,
                            summary="s", engine=engine, environment=env,
                            metrics=findings.metric_values({"reused_tokens": 12}), **kw)


def test_write_then_load_round_trips(tmp_path):
    f = make()
    path = findings.write(f, tmp_path)
    assert path.name == f"{f.id}.json"
    df = findings.load(tmp_path)
    assert list(df["id"]) == [f.id] and df.loc[0, "metric.reused_tokens"] == 12
    assert json.loads(path.read_text())["metrics"]["reused_tokens"] == {"value": 12, "unit": "tokens"}


def test_findings_are_never_overwritten(tmp_path):
    f = make()
    findings.write(f, tmp_path)
    with pytest.raises(findings.FindingError, match="never overwritten"):
        findings.write(f, tmp_path)
    assert len(list(tmp_path.glob("*.json"))) == 1
    assert not list(tmp_path.glob(".finding-*"))  # no temp files left behind


def test_invalid_finding_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(findings.FindingError, match="verdict"):
        findings.write(make(verdict="maybe"), tmp_path)
    with pytest.raises(findings.FindingError, match="unknown claim"):
        findings.write(make(claim_verdicts={"claim.nope": "confirmed"}), tmp_path)
    with pytest.raises(KeyError, match="not declared"):
        findings.metric_values({"speed": 1})
    assert not list(tmp_path.iterdir())


def test_corrupt_files_are_reported_and_skipped(tmp_path):
    findings.write(make(), tmp_path)
    (tmp_path / "broken.json").write_text("{not json")
    bad = make().to_dict() | {"verdict": "perhaps"}
    (tmp_path / "invalid.json").write_text(json.dumps(bad))
    (tmp_path / "run.json").write_text("{}")
    s = findings.scan([tmp_path])
    assert len(s.findings) == 1 and {p.name for p, _ in s.errors} == {"broken.json", "invalid.json"}
    with pytest.warns(UserWarning, match="skipping corrupt finding"):
        assert len(findings.load(tmp_path)) == 1


def test_engines_and_versions_sit_side_by_side(tmp_path):
    for engine, version, verdict in (("llamacpp", "0.3.36", "confirmed"), ("trtllm", "1.2.1", "partial"),
                                     ("trtllm", "1.3.0", "refuted"), ("trtllm", None, "not-run")):
        findings.write(make(engine=engine, version=version, verdict=verdict,
                            reason="no GPU" if verdict == "not-run" else None), tmp_path)
    df = findings.load(tmp_path)
    assert len(df) == 4
    pivot = df.pivot_table(index="probe", columns=["engine", "engine_version"], values="verdict", aggfunc="first")
    assert pivot.loc["reuse.per_request_metrics", ("trtllm", "1.2.1")] == "partial"
