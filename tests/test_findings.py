"""The findings store: schema validation, atomic never-overwriting writes, tolerant loading."""

from __future__ import annotations

import json
import tempfile

import pytest

from workbench import findings
from workbench.environment import fingerprint


def make(probe="reuse.per_request_metrics", engine="llamacpp", verdict="confirmed", version="0.3.36", **kw):
    env = fingerprint(engine, version)
    return findings.Finding(probe=probe, claims=["unknown.reuse_metrics"], verdict=verdict,
                            summary="s", engine=engine, environment=env,
                            metrics=findings.metric_values({"reused_tokens": 12}), **kw)


def test_write_then_load_round_trips(tmp_path):
    f = make()
    path = findings.write(f, tmp_path)
    assert path.name == f"{f.id}.json"
    df = findings.load(tmp_path)
    assert list(df["id"]) == [f.id] and df.loc[0, "metric.reused_tokens"] == 12
    assert json.loads(path.read_text())["metrics"]["reused_tokens"] == {"value": 12, "unit": "tokens", "source": "cell"}


def test_v1_findings_still_load_in_the_v2_shape(tmp_path):
    doc = make().to_dict()
    v1 = {k: v for k, v in doc.items() if k not in ("probe_version", "cell_options")} | {
        "schema": "workbench.finding/v1", "claim": "Exact LLM-API surface and granularity of per-request KV reuse.",
        "metrics": {"reused_tokens": {"value": 12, "unit": "tokens"}}, "params": {"repeats": 1, "n_threads": 2}}
    (tmp_path / "old.json").write_text(json.dumps(v1))
    ((path, f),) = findings.scan([tmp_path]).findings
    assert f.schema == findings.SCHEMA_ID and f.claims == ["unknown.reuse_metrics"]
    assert f.probe_version == "0" and f.cell_options == {} and f.params == {"repeats": 1, "n_threads": 2}
    assert f.metrics["reused_tokens"]["source"] == "cell"


def test_a_finding_given_twice_counts_once(tmp_path):
    path = findings.write(make(), tmp_path / "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / path.name).write_bytes(path.read_bytes())
    assert len(findings.scan([tmp_path / "a", tmp_path / "b", path]).findings) == 1


def test_not_applicable_is_a_verdict_of_the_schema(tmp_path):
    f = make(verdict="not-applicable").validate()
    assert findings.from_dict(json.loads(findings.write(f, tmp_path).read_text())).verdict == "not-applicable"


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


# --------------------------------------------------------------------------- issue 23: nothing lost


def test_a_fifo_named_like_a_finding_is_skipped_not_waited_on(tmp_path):
    import os

    good = findings.write(make(), tmp_path)
    os.mkfifo(tmp_path / "pipe.json")  # nobody ever writes to it: reading it would block forever
    s = findings.scan([tmp_path])
    assert [p for p, _ in s.findings] == [good]
    ((path, err),) = s.errors
    assert path.name == "pipe.json" and "not a regular file" in err


def test_deeply_nested_json_is_a_one_line_warning_not_a_crash(tmp_path):
    good = findings.write(make(), tmp_path)
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    s = findings.scan([tmp_path])
    assert [p for p, _ in s.findings] == [good]
    ((path, err),) = s.errors
    assert path.name == "deep.json" and "nested too deeply" in err and "\n" not in err


def test_an_unknown_finding_schema_is_refused_with_a_message_not_skipped_silently(tmp_path):
    doc = make().to_dict() | {"schema": "workbench.finding/v9"}
    (tmp_path / "new.json").write_text(json.dumps(doc))
    (tmp_path / "other.json").write_text(json.dumps({"schema": "workbench.run/v1"}))  # not a finding: not an error
    s = findings.scan([tmp_path])
    assert s.findings == []
    ((path, err),) = s.errors
    assert path.name == "new.json" and "workbench.finding/v3" in err and "upgrade" in err


def test_findings_are_strict_json_with_non_finite_numbers_as_null_and_a_note(tmp_path):
    f = make()
    f.metrics = findings.metric_values({"reused_tokens": float("nan")})
    f.evidence = {"rows": [{"x": float("inf")}], "notes": []}
    path = findings.write(f, tmp_path)
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    doc = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert doc["metrics"]["reused_tokens"]["value"] is None and doc["evidence"]["rows"][0]["x"] is None
    (note,) = doc["evidence"]["notes"]
    assert "metrics.reused_tokens.value (nan)" in note and "evidence.rows[0].x (inf)" in note


def test_the_attempt_id_is_written_into_the_finding(tmp_path, monkeypatch):
    monkeypatch.setenv(findings.ATTEMPT_ENV, "a1b2c3")
    path = findings.write(make(), tmp_path)
    assert json.loads(path.read_text())["attempt"] == "a1b2c3"
    ((_, f),) = findings.scan([tmp_path]).findings
    assert f.attempt == "a1b2c3"
    monkeypatch.delenv(findings.ATTEMPT_ENV)
    assert "attempt" not in make().to_dict()  # outside a run: no field, as before


def test_a_finding_that_cannot_be_written_is_kept_and_its_place_named(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    (tmp_path / "a-file").write_text("")
    f = make()
    with pytest.raises(findings.FindingNotSaved) as e:
        findings.write(f, tmp_path / "a-file" / "findings")  # a path under a file: no folder can be made there
    (kept,) = e.value.recovered
    assert kept == findings.recovery_dir() / f"{f.id}.json" and str(kept) in str(e.value)
    assert findings.read(kept).id == f.id


def test_a_finding_saved_nowhere_names_the_recovery_folder_that_refused_it(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "a-file"))  # no recovery folder can be made
    (tmp_path / "a-file").write_text("")
    with pytest.raises(findings.FindingNotSaved, match=f"nor in {findings.recovery_dir()}") as e:
        findings.write(make(), tmp_path / "a-file" / "findings")
    assert e.value.recovered == [None]


def test_write_all_keeps_every_finding_when_the_folder_fails(tmp_path, monkeypatch):
    """The loop writes one finding per arm and the gate: the first failure must not cost the others."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    (tmp_path / "a-file").write_text("")
    found = [make(), make(engine="vllm")]
    with pytest.raises(findings.FindingNotSaved, match="2 finding\\(s\\) could not be written") as e:
        findings.write_all(found, tmp_path / "a-file" / "f")
    assert sorted(findings.read(p).id for p in e.value.recovered) == sorted(f.id for f in found)
