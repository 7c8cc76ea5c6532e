"""Bad inputs a demanding user gives the real CLI (issue 36, the adversary's round): probe parameters past either
bound, synthetic model specs no engine can load, malformed loop traces, ``WORKBENCH_*`` variables naming a file,
server arguments that override what ``workbench serve`` owns, keys given twice, PYTHONHASHSEEDs Python refuses.

Each row runs the command line in a fresh folder, in-process (``tests/clirun.py``: typer's ``CliRunner``, an escaped
exception written out as a traceback), with no ``WORKBENCH_*`` variable but the model cache and its own, and expects
its exit code, one ``error:`` line naming what to fix, no traceback, no finding written and the human's file
(``human.md``, or the file a variable names) byte for byte as it was. Every row fails before any engine or server
starts, so the table is cheap.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from clirun import wb

HUMAN = b"# my notes\n\nnot to be touched\n"
PROBE = ("probe", "reuse.per_request_metrics", "--model", "synthetic:tiny", "--out", "out")
LOOP = ("loop", "--arms", "llamacpp", "--model", "synthetic:tiny", "--turns", "1", "--sessions", "1", "--out", "out")
TRACES = {  # a loop trace file each row may name, written into the row's folder
    "negout.json": json.dumps({"block_size": 16, "requests": [{"in": 20, "out": -1, "hash_ids": [1]}]}),
    "inf.json": '{"block_size": 16, "requests": [{"in": 1e400, "out": 4, "hash_ids": [1]}]}',
    "noids.jsonl": '{"input_length": 10, "output_length": 3, "hash_ids": []}\n',
    "empty-runs.json": json.dumps([{"traj": []}]),
}

#: (case, argv, environment, the one line says)
CASES = [
    ("seed below 0", (*PROBE, "-p", "seed=-1"), {}, "parameter seed=-1 must be at least 0"),
    ("seed over 32 bits", (*PROBE, "-p", "seed=99999999999"), {}, "seed=99999999999 must be at most 4294967295"),
    ("resamples absurd", ("probe", "isolation.cache_salt", "--model", "synthetic:tiny", "--out", "out",
                          "-p", "resamples=100000000000"), {}, "resamples=100000000000 must be at most 1000000"),
    ("trials absurd (the KS floor)", ("probe", "isolation.cache_salt", "--model", "synthetic:tiny", "--out", "out",
                                      "-p", "trials=1000000000"), {}, "trials=1000000000 must be at most 100000"),
    ("expiry_ms below 0", ("probe", "retention.pinning_under_pressure", "--model", "synthetic:tiny", "--out", "out",
                           "-p", "expiry_ms=-5"), {}, "expiry_ms=-5 must be at least 0"),
    ("a priority over 100", ("probe", "retention.pinning_under_pressure", "--model", "synthetic:tiny", "--out",
                             "out", "-p", "priorities=5,101"), {}, "priorities=101 must be at most 100"),
    ("blocks past the context", (*PROBE, "-p", "blocks=100000"), {},
     "blocks × nominal_block + 1 + tail_tokens (100000 × 32 + 1 + 16) = 3200017 tokens exceeds the context"),
    ("a key given twice", (*PROBE, "-p", "seed=1", "-p", "seed=2"), {}, "-p seed given twice ('1', '2')"),
    ("a cell option given twice", (*PROBE, "-c", "threads=1", "-c", "threads=2"), {}, "-c threads given twice"),
    ("a run parameter given twice", ("run", "--out", "run", "-p", "x=1", "-p", "x=2"), {}, "-p x given twice"),
    ("hash_seed not a PYTHONHASHSEED", ("probe", "events.one_consumer", "--model", "synthetic:tiny", "--out", "out",
                                        "-p", "hash_seed=abc"), {}, "hash_seed 'abc' is not a PYTHONHASHSEED"),
    ("synthetic key twice", ("probe", "reuse.per_request_metrics", "--model", "synthetic:layers=2,layers=3",
                             "--out", "out"), {}, "gives layers twice"),
    ("synthetic two presets", ("probe", "reuse.per_request_metrics", "--model", "synthetic:tiny,small",
                               "--out", "out"), {}, "names two presets (tiny, small)"),
    ("synthetic layers over 512", ("probe", "reuse.per_request_metrics", "--model", "synthetic:layers=100000",
                                   "--out", "out"), {}, "layers must be at most 512"),
    ("synthetic ctx over uint32", ("probe", "reuse.per_request_metrics", "--model", "synthetic:ctx=99999999999",
                                   "--out", "out"), {}, "ctx must be in 1 … 4294967295"),
    ("synthetic weights past memory", ("probe", "reuse.per_request_metrics", "--model",
                                       "synthetic:embd=4096,heads=32,kv_heads=8,ffn=100000000", "--out", "out"), {},
     "of memory; make it smaller"),
    ("WORKBENCH_CACHE a file", PROBE, {"WORKBENCH_CACHE": "human.md"}, "WORKBENCH_CACHE human.md is a file"),
    ("WORKBENCH_SERVER_LOGS a file", ("bench", "--model", "synthetic:tiny", "--rounds", "1"),
     {"WORKBENCH_SERVER_LOGS": "human.md"}, "WORKBENCH_SERVER_LOGS human.md is a file"),
    ("WORKBENCH_STATE a file", ("events", "watch", "--endpoint", "tcp://127.0.0.1:1", "--duration", "0.2"),
     {"WORKBENCH_STATE": "human.md"}, "WORKBENCH_STATE human.md is a file"),
    ("events watch --hash-seed", ("events", "watch", "--endpoint", "tcp://127.0.0.1:1", "--duration", "0.2",
                                  "--hash-seed", "abc"), {}, "--hash-seed 'abc' is not a PYTHONHASHSEED"),
    ("events guide names the guide", ("events", "guide", ".", "--guide", "no-such-guide.md", "--out", "g.md"), {},
     "no guide at"),
    ("serve -- --host", ("serve", "llamacpp-server", "--model", "synthetic:tiny", "--log-dir", "logs", "--",
                         "--host", "0.0.0.0"), {}, "use `workbench serve --host`"),
    ("serve -- --port=N", ("serve", "llamacpp-server", "--model", "synthetic:tiny", "--log-dir", "logs", "--",
                           "--port=8080"), {}, "use `workbench serve --port`"),
    ("serve an unbindable host", ("serve", "llamacpp-server", "--model", "synthetic:tiny", "--log-dir", "logs",
                                  "--host", "not a host", "--api-key", "k"), {}, "cannot bind host 'not a host'"),
    ("serve an empty host", ("serve", "llamacpp-server", "--model", "synthetic:tiny", "--log-dir", "logs",
                             "--host", "", "--api-key", "k"), {}, "the host to bind is empty"),
    ("bench past the context", ("bench", "--model", "synthetic:tiny", "--prompt-tokens", "5000", "--rounds", "1"),
     {}, "exceed the context of model synthetic:tiny (4096 tokens"),
    ("loop block past the context", (*LOOP, "--trace", "mooncake", "--tokens-per-block", "99999999999"), {},
     "tokens_per_block must be 1 to the 8192-token context"),
    ("trace: a negative output", (*LOOP, "--trace", "negout.json"), {}, "negout.json: a request's out is -1"),
    ("trace: an infinite count", (*LOOP, "--trace", "inf.json"), {}, "inf.json: a request's in is inf"),
    ("trace: no hash ids", (*LOOP, "--trace", "noids.jsonl"), {}, "noids.jsonl:1: request with 10 tokens"),
    ("trace: no turn", (*LOOP, "--trace", "empty-runs.json"), {}, "the trace holds no turn to replay"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_nothing_lost(case, tmp_path):
    _, argv, env, says = case
    here = tmp_path
    (here / "human.md").write_bytes(HUMAN)
    for file, text in TRACES.items():
        (here / file).write_text(text)
    cache = os.environ.get("WORKBENCH_CACHE", str(Path.home() / ".cache" / "workbench"))
    proc = wb(*argv, cwd=here, drop_env="WORKBENCH_", env={"WORKBENCH_CACHE": cache, **env})
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and says in errors[0], proc.stderr
    assert (here / "human.md").read_bytes() == HUMAN
    assert not list(here.rglob("*.json")) or {p.name for p in here.rglob("*.json")} <= set(TRACES)
    assert not (here / "out").exists() or not list((here / "out").iterdir())
