"""Version churn end to end over the two release profiles, on the TensorRT-LLM double: ``workbench run --matrix``
with one environment per release (``env_vars`` only, which the local executor provides), the churn rule comparing
the two surveys, and the written-back blueprint's version-churn row naming what changed.

A double is never the subject's answer: each survey's fingerprint names the double, so the churn verdict is shown
with its changes but settles nothing (``standing.version_churn``), while the mechanics are seen to work.
"""

from __future__ import annotations

import os
import subprocess
import sys

import yaml
from doubles.trtllm_fixture import RELEASE_ENV, SITE

from workbench import findings, manifest, standing
from workbench.executors import ExecutorError, Job, local_env
from workbench.runner import LocalExecutor


def _matrix(tmp_path):
    path = os.pathsep.join(filter(None, [str(SITE), os.environ.get("PYTHONPATH")]))
    doc = {"engines": ["trtllm"], "models": ["synthetic:tiny"], "notebooks": ["50_capacity_surface"],
           "environments": {f"trtllm-{v}": {"env_vars": {"PYTHONPATH": path, RELEASE_ENV: v}}
                            for v in ("1.2.1", "1.4.0rc1")}}
    m = tmp_path / "churn.yaml"
    m.write_text(yaml.safe_dump(doc))
    return m


def test_a_churn_run_over_the_two_profiles_writes_the_release_difference_into_the_blueprint(tmp_path):
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "run", "--matrix", str(_matrix(tmp_path)), "--out",
                        str(out), "--lanes", "1"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = manifest.load(out)
    assert {e.environment for k, e in m.notebooks.items() if k.endswith("50_capacity_surface")} == {
        "trtllm-1.2.1", "trtllm-1.4.0rc1"}
    found = findings.scan([out / "findings"]).findings
    surveys = [f for _, f in found if f.probe == "surface.contract_mapping"]
    assert sorted(f.engine_version for f in surveys) == ["1.2.1", "1.4.0rc1"]
    assert all(f.environment["test_double"].startswith("tests/doubles/fake_tensorrt_llm") for f in surveys)

    churn = standing.version_churn(found)
    assert churn.verdict == "confirmed" and churn.engine_version == "1.2.1 → 1.4.0rc1"
    assert churn.unsettled and "made on a test double" in churn.unsettled[0] and not churn.answers
    for change in ("KvCacheConnectorWorker [connector]: found at _torch.pyexecutor.connectors",
                   "llmapi.KvCacheConfig [core]: use_kv_cache_manager_v2 defaults to True, was False",
                   "llmapi.KVEventsConfig [push]: found at llmapi.KVEventsConfig, was nowhere",
                   "kv_events_config added", "cached_tokens added"):
        assert change in churn.summary, churn.summary

    text = (out / "blueprint.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| Version churn across TensorRT-LLM releases."))
    assert "unresolved — confirmed on TensorRT-LLM 1.2.1 → 1.4.0rc1 settles nothing" in row
    assert "what changed (settles nothing) · 1.2.1 → 1.4.0rc1:" in row
    assert "use_kv_cache_manager_v2 defaults to True, was False" in row and "[survey](" in row


def test_the_local_executor_provides_an_environment_of_env_vars_only():
    assert local_env(Job(None, environment="a", runtime_env={"env_vars": {"X": 1}})) == {"X": "1"}
    assert local_env(Job(None)) == {}
    assert local_env(Job(None, environment="b", runtime_env={"pip": ["x==1"], "env_vars": {"X": "1"}})) is None
    LocalExecutor().check([Job(_Planned(), environment="a", runtime_env={"env_vars": {"X": "1"}})])
    try:
        LocalExecutor().check([Job(_Planned(), environment="b", runtime_env={"pip": ["x==1"]})])
    except ExecutorError as e:
        assert "environments (b) are Ray runtime_envs" in str(e) and "env_vars only runs here" in str(e)
    else:
        raise AssertionError("a pip environment ran on the local executor")


class _Planned:
    parameters: dict = {}
