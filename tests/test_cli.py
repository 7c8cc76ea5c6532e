"""The workbench command line: exit codes, clear errors, doctor tells the truth."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from clirun import wb  # the command line in-process: what a command says and exits with, without its imports' seconds

ROOT = Path(__file__).resolve().parents[1]


def test_doctor_json_tells_the_truth_on_this_machine():
    r = wb("doctor", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["engines"]["llamacpp"]["available"] is True
    assert rep["engines"]["trtllm"]["available"] is False
    assert "tensorrt_llm" in rep["engines"]["trtllm"]["reason"]
    assert "llamacpp" in rep["runnable_engines"] and "trtllm" not in rep["runnable_engines"]
    assert rep["gpu"]["available"] is False and rep["gpu"]["reason"]


def test_probe_command_prints_verdict_and_writes_the_finding(tmp_path):
    r = wb("probe", "capacity.budget_policy", "--engine", "llamacpp", "--model", "synthetic:tiny",
           "-p", "tolerance=0.05", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("confirmed:")  # llama.cpp pads 300 tokens to 512: +71 % of the bytes
    assert "KV capacity" in r.stdout or "measured capacity" in r.stdout
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_not_run_is_not_an_error(tmp_path):
    r = wb("probe", "reuse.per_request_metrics", "--engine", "trtllm", "--model", "synthetic:tiny", "--out", str(tmp_path))
    assert r.returncode == 0 and r.stdout.startswith("not-run:")


def test_bad_input_exits_non_zero_naming_the_fix(tmp_path):
    cases = [
        (("probe", "nope", "--out", str(tmp_path)), "valid probes"),
        (("probe", "capacity.budget_policy", "--engine", "sglang", "--out", str(tmp_path)), "valid engines"),
        (("probe", "capacity.budget_policy", "-p", "bogus=1", "--out", str(tmp_path)), "valid: tolerance"),
        (("probe", "capacity.budget_policy", "-p", "tolerance", "--out", str(tmp_path)), "key=value"),
        (("probe", "capacity.budget_policy", "--model", "synthetic:nope", "--out", str(tmp_path)), "preset"),
        (("probe", "retention.pinning_under_pressure", "-p", "pressure=inf", "--out", str(tmp_path)),
         "parameter pressure must be float (finite)"),
        (("probe", "retention.pinning_under_pressure", "-p", "pressure=nan", "--out", str(tmp_path)),
         "parameter pressure must be float (finite)"),
        (("probe", "retention.pinning_under_pressure", "-p", "pressure=-1", "--out", str(tmp_path)),
         "pressure ratios must be positive"),
        (("probe", "capacity.budget_policy", "-m", "synthetic:tiny", "-c", "kv_budget_bytes=100", "--out",
          str(tmp_path)), "kv_budget_bytes=100 is below one token"),
        (("probe", "reuse.per_request_metrics", "-m", "synthetic:tiny", "-c", "bogus_option=1", "--out",
          str(tmp_path)), "bogus_option"),
        (("probe", "surface.contract_mapping", "--model", "synthetic:tiny", "--out", str(tmp_path)), "drop --model"),
        (("probe", "surface.contract_mapping", "--out", str(tmp_path / "x.json")), None),
        (("writeback", "data/blueprint/blueprint.md", "--findings", str(tmp_path / "nowhere"), "--out",
          str(tmp_path / "bp.md")), "no findings folder"),
    ]
    (tmp_path / "x.json").write_text("{}")
    for args, message in cases:
        r = wb(*args, cwd=ROOT)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert (message or "is a file") in r.stderr and "Traceback" not in r.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"] and (tmp_path / "x.json").read_text() == "{}"


def test_findings_of_a_missing_folder_exits_2_naming_it(tmp_path):
    r = wb("findings", str(tmp_path / "nope"))
    assert r.returncode == 2 and "nope" in r.stderr


def test_findings_command_lists_and_reports_corrupt(tmp_path):
    wb("probe", "surface.contract_mapping", "--out", str(tmp_path))
    (tmp_path / "junk.json").write_text("{")
    r = wb("findings", str(tmp_path))
    assert r.returncode == 0 and "surface.contract_mapping" in r.stdout and "corrupt" in r.stderr


def test_findings_names_a_forgery_as_settling_nothing():
    forged = Path(__file__).parent / "fixtures" / "forged"
    r = wb("findings", str(forged))
    assert r.returncode == 0 and "[settles nothing: it is dated 2099" in r.stdout


# --------------------------------------------------------------------------- issue 23


def test_bad_options_exit_2_naming_the_fix(tmp_path):
    (tmp_path / "a-file").write_text("")
    bp = tmp_path / "latin1.md"
    bp.write_bytes("Caf\u00e9\n".encode("latin-1"))
    cases = [
        (("bench", "--rounds", "0"), "--rounds"),
        (("bench", "--prompt-tokens", "-5"), "--prompt-tokens"),
        (("loop", "--min-speedup", "nan", "--out", str(tmp_path)), "must be a finite number"),
        (("loop", "--min-speedup", "inf", "--out", str(tmp_path)), "must be a finite number"),
        (("loop", "--turns", "0", "--out", str(tmp_path)), "--turns"),
        (("probe", "reuse.per_request_metrics", "-m", "synthetic:tiny", "--out", str(tmp_path / "a-file" / "f")),
         "cannot be written"),
        (("probe", "reuse.per_request_metrics", "-m", "synthetic:tiny", "--out", "/proc/workbench-findings"),
         "cannot be written"),
        (("loop", "--model", "synthetic:tiny", "--out", str(tmp_path / "a-file" / "f")), "cannot be written"),
        (("run", "--out", str(tmp_path / "a-file" / "run")), "cannot be written"),
        (("writeback", str(tmp_path), "--findings", str(tmp_path)), "is not a Markdown file"),
        (("writeback", str(bp), "--findings", str(tmp_path)), "is not UTF-8"),
    ]
    for args, message in cases:
        r = wb(*args, cwd=ROOT)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert message in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "latin1.md"]  # nothing written, nothing run


def test_run_scopes_a_model_or_parameter_to_one_engine():
    from workbench import cli

    assert cli._models([]) == ("smollm2-135m", {})
    assert cli._models(["smollm2-135m", "vllm=synthetic:cpu"]) == ("smollm2-135m", {"vllm": "synthetic:cpu"})
    assert cli._models(["vllm=synthetic:cpu", "/m/a=b.gguf"]) == ("/m/a=b.gguf", {"vllm": "synthetic:cpu"})  # a path
    assert cli._engine_params(["prompt_tokens=64", "vllm:prompt_tokens=192", "vllm:seed=a:b"]) == (
        {"prompt_tokens": "64"}, {"vllm": {"prompt_tokens": "192", "seed": "a:b"}})


def test_run_refuses_an_engine_scope_it_cannot_place(tmp_path):
    cases = [
        (("--model", "vlm=synthetic:cpu"), "'vlm' is not an engine; engines: llamacpp"),
        (("--model", "smollm2-135m", "--model", "synthetic:tiny"), "--model given 2 times for every engine"),
        (("--model", "vllm=synthetic:cpu", "--model", "vllm=synthetic:tiny"), "--model vllm=… given twice"),
        (("-p", "vlm:prompt_tokens=192"), "'vlm' is not an engine"),
        (("-p", "Bad Engine:prompt_tokens=192"), "'Bad Engine' is not an engine name"),
        (("--engine", "llamacpp", "--model", "vllm=synthetic:cpu"), "vllm: not an engine of this batch (llamacpp)"),
    ]
    for args, message in cases:
        r = wb("run", "--out", str(tmp_path / "run"), *args, cwd=ROOT)
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    assert not (tmp_path / "run" / "run.json").exists()


def test_a_second_run_into_a_folder_exits_2_naming_the_holder(tmp_path):
    code = ("import sys, time; from pathlib import Path; from workbench import runlock\n"
            "with runlock.writer(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        r = wb("run", "--out", str(tmp_path), "--only", "retention", cwd=ROOT)
        assert r.returncode == 2 and f"being written by pid {holder.pid}" in r.stderr and "--wait" in r.stderr
        assert not (tmp_path / "run.json").exists()
    finally:
        holder.kill()
        holder.wait()


def test_findings_survives_a_fifo_and_deep_nesting(tmp_path):
    import os

    wb("probe", "surface.contract_mapping", "--out", str(tmp_path))
    os.mkfifo(tmp_path / "pipe.json")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    # a child process: a FIFO opened for reading would block it, a recursive parse could overflow its stack
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "findings", str(tmp_path)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "surface.contract_mapping" in r.stdout
    warned = [line for line in r.stderr.splitlines() if line.startswith("corrupt:")]
    assert len(warned) == 2 and any("pipe.json" in w and "not a regular file" in w for w in warned)
    assert any("deep.json" in w and "nested too deeply" in w for w in warned)


def test_doctor_prints_each_part_as_it_is_read():
    """Issue 51: ``doctor`` said nothing for 33 s (the engines' imports, the model's decode), then everything. Each
    part is printed as it is read: the machine first, each engine as its availability is known, the model last."""
    from workbench import doctor

    seen: list[tuple[str, list[str]]] = []
    rep = doctor.report(on_part=lambda part, r: seen.append((part, doctor.lines(part, r))))
    parts = [p for p, _ in seen]
    assert parts[0] == "machine" and parts[-2:] == ["default_model", "runnable_engines"]
    assert parts.count("engines") == len(rep["engines"]) >= 3
    assert [ls[0].split(":")[0] for p, ls in seen if p == "engines"] == [f"engine      {e}" for e in rep["engines"]]
    assert "\n".join(line for _, ls in seen for line in ls) == doctor.render(rep)  # the same lines, in order
