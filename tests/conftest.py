"""Shared fixtures: real llama.cpp cells on small synthetic models, isolated caches."""

from __future__ import annotations

import json
import os
import signal

import pytest

TINY = "synthetic:tiny"


@pytest.fixture(scope="session", autouse=True)
def _model_cache(tmp_path_factory):
    """Synthetic models are cached per test session unless WORKBENCH_CACHE is set by the caller."""
    if not os.environ.get("WORKBENCH_CACHE"):
        os.environ["WORKBENCH_CACHE"] = str(tmp_path_factory.mktemp("wbcache"))
    yield


@pytest.fixture
def cell():
    """A real llama.cpp cell on the tiny synthetic model with two slots and a 1024-token KV cache."""
    from workbench import open_cell

    with open_cell("llamacpp", TINY, slots=2, kv_budget_tokens=1024) as c:
        yield c


@pytest.fixture
def crashing_llama(tmp_path):
    """Environment for a child Python whose llama.cpp segfaults at the first decode, through the engine's own
    API (``llama_decode`` on a NULL context), as llama.cpp #20824 does on AMX CPUs."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(
        "import llama_cpp\n"
        "_decode = llama_cpp.llama_decode\n"
        "def crashing(ctx, batch):\n"
        "    return _decode(None, batch)\n"
        "llama_cpp.llama_decode = crashing\n")
    return os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(inject), os.environ.get("PYTHONPATH")]))}


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process from /proc, or None when it is gone."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a zombie holds no memory and runs nothing)."""
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def descendants(pid: int) -> list[int]:
    """Every living process below ``pid`` (children, grandchildren, …), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None and st[0] not in ("Z", "X"):
            children.setdefault(st[1], []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def naming(text: str) -> list:
    """The processes (psutil) whose command line names ``text``: a Ray session's processes name its temp folder."""
    import psutil

    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(text in part for part in p.info["cmdline"] or []):
                found.append(p)
        except (psutil.Error, TypeError):
            pass
    return found


def listening(pids) -> list[tuple[str, str, int]]:
    """(process name, ip, port) of every listening inet socket of ``pids``, read from the OS."""
    import psutil

    found = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            found += [(proc.name(), c.laddr.ip, c.laddr.port) for c in proc.net_connections("inet")
                      if c.status == psutil.CONN_LISTEN]
        except psutil.Error:
            continue
    return found


def off_loopback(sockets) -> list[tuple[str, str, int]]:
    """The sockets of :func:`listening` bound off loopback (an IPv4-mapped loopback counts as loopback)."""
    import ipaddress

    def loop(ip: str) -> bool:
        a = ipaddress.ip_address(ip)
        return (getattr(a, "ipv4_mapped", None) or a).is_loopback

    return [s for s in sockets if not loop(s[1])]


def require_ray():
    """Ray's module; skip without it (the ``fleet`` extra), fail where WORKBENCH_REQUIRE_FLEET=1 (.ci/run)."""
    try:
        import ray
    except ImportError:
        if os.environ.get("WORKBENCH_REQUIRE_FLEET") == "1":
            pytest.fail("ray is not installed (WORKBENCH_REQUIRE_FLEET=1 requires it): pip install -e '.[fleet]'",
                        pytrace=False)
        pytest.skip("ray is not installed: the fleet extra (pip install -e '.[fleet]') runs these tests")
    return ray


def interruptible() -> None:
    """``preexec_fn`` for a child a test interrupts: SIGINT back to its default, as at a terminal. A suite started
    in the background (as some CI runners do) inherits SIGINT ignored, and Python keeps an inherited ignore (it
    raises KeyboardInterrupt only where SIGINT was at its default), so the child would never see the Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def gone_within(seconds: float, pids) -> list[int]:
    """The pids still alive after waiting up to ``seconds`` for them to end ([] when all ended)."""
    import time

    deadline = time.monotonic() + seconds
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def ids(n: int, start: int = 300) -> list[int]:
    """Deterministic token ids inside the synthetic vocabulary."""
    return [start + (i * 37) % (500 - start) for i in range(n)]


@pytest.fixture
def run_probe(tmp_path):
    """Run a probe on the real llama.cpp cell in this process (so faults injected through llama.cpp's own
    API reach the engine) and check that what was written is schema-valid."""
    import json

    from workbench import findings, models, probes

    def run(name: str, **params):
        static = not probes.get(name).needs_engine
        f = probes.run(name, engine="llamacpp", model=models.DEFAULT_MODEL if static else TINY, params=params,
                       out=tmp_path, isolated=False)
        doc = json.loads((tmp_path / f"{f.id}.json").read_text())
        findings.validate(doc)
        assert doc["environment"]["engine_version"] and doc["probe_version"] == probes.get(name).version
        return f

    return run


@pytest.fixture(scope="session")
def vllm_reuse(tmp_path_factory):
    """``reuse.per_request_metrics`` run once on the real vLLM in this process (``synthetic:cpu``, one repeat) and
    the folder it wrote its finding to: tests/probes/test_on_vllm.py and tests/test_report.py each ran this same
    probe with these same parameters (one engine load each)."""
    from workbench import findings, probes

    require_engine("vllm")
    out = tmp_path_factory.mktemp("vllm-reuse")
    f = probes.run("reuse.per_request_metrics", engine="vllm", model="synthetic:cpu", params={"repeats": 1}, out=out,
                   isolated=False)
    findings.validate(json.loads((out / f"{f.id}.json").read_text()))
    return f, out


VLLM_CHILD = """
import json
from workbench.loop import arms, spec
arm = arms.open_arm("vllm-spec", "synthetic:cpu", threads=1, context_tokens=1024, drafter=spec.Drafter())
try:
    from vllm.usage import usage_lib
    print("usage stats enabled:", usage_lib.is_usage_stats_enabled())
    prompt = [300 + i % 11 for i in range(160)]  # a repeating prompt: n-gram lookups find matches
    out = [arm.turn(prompt, 32) for _ in range(2)]
finally:
    arm.close()
print(json.dumps([[r.speculation_source, r.drafted, r.accepted, r.drafted_steps] for r in out]))
"""


@pytest.fixture(scope="session")
def vllm_child(tmp_path_factory):
    """A fresh Python that starts the workbench's in-process vLLM (the n-gram speculation arm, two turns) with
    neither VLLM_NO_USAGE_STATS nor DO_NOT_TRACK set and a HOME of its own (no ~/.config/vllm/do_not_track of the
    machine's), and what it printed: tests/loop/test_spec.py reads the engine's speculation counters,
    tests/probes/test_on_vllm.py its usage-statistics switch. Each started such a child (a cold vLLM import, tens
    of seconds here). Speculation runs in a child because its n-gram proposer imports numba, whose objects break
    later in-process vLLM starts here."""
    import subprocess
    import sys

    require_engine("vllm")
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_NO_USAGE_STATS", "DO_NOT_TRACK")}
    env["HOME"] = str(tmp_path_factory.mktemp("home"))
    return subprocess.run([sys.executable, "-c", VLLM_CHILD], capture_output=True, text=True, env=env, timeout=900)


@pytest.fixture
def llama_api():
    """llama_cpp's module, for injecting faults through the engine's own C API."""
    import llama_cpp

    return llama_cpp


# --------------------------------------------------------------------------- engines that may be absent

REQUIRE_ENV = "WORKBENCH_REQUIRE_ENGINES"
"""Comma-separated engines that must run (CI sets it in .ci/run): their absence fails, never skips."""

_NOT_RUN: dict[str, str] = {}  # engine -> why its tests did not run


def require_engine(name: str) -> None:
    """Skip the calling test when ``name`` cannot run here, saying why; fail instead where it is required."""
    from workbench import cells

    a = cells.availability(name)
    if a.available:
        return
    reason = f"engine {name} is not available here: {a.reason}"
    if name in {e.strip() for e in os.environ.get(REQUIRE_ENV, "").split(",")}:
        pytest.fail(f"{reason} ({REQUIRE_ENV} requires it)", pytrace=False)
    _NOT_RUN[name] = a.reason or "unknown reason"
    pytest.skip(reason)


def pytest_terminal_summary(terminalreporter):
    """On a machine without an engine, say plainly which engine tests did not run and why."""
    skipped = terminalreporter.stats.get("skipped", [])
    for name, why in sorted(_NOT_RUN.items()):
        n = sum(1 for r in skipped if f"engine {name} is not available" in str(r.longrepr))
        terminalreporter.write_sep("-", f"{n} {name} engine test(s) did NOT run")
        terminalreporter.write_line(f"why: {why}")
        terminalreporter.write_line(f"to run them: install the engine, or set {REQUIRE_ENV}={name} to make its "
                                    "absence a failure")


@pytest.fixture
def hand_built(monkeypatch):
    """For a test of one rule on hand-built findings, which have no evidence rows to re-derive from: the
    re-derivation of a finding's outcome from its own evidence (``probes.Declared.check_evidence``), and its check
    against the other findings of its run, answer nothing here, so the rule under test is the one that speaks. tests/test_provenance.py re-derives real findings, and
    builds every forgery from one."""
    from workbench import probes, settle

    monkeypatch.setattr(probes.Declared, "check_evidence", lambda self, f: [])
    monkeypatch.setattr(settle, "_across", lambda d, f, found: ())  # nor the findings of its run (none here)
    settle.forget()
    yield
    settle.forget()


#: A fingerprint's GPU as NVML reads one (what an on-target finding of TensorRT-LLM carries).
GPU = {"available": True, "devices": [{"name": "NVIDIA H200"}]}


@pytest.fixture(autouse=True)
def _verification_kept_per_test():
    """What workbench.settle keeps of each finding's verification lives for one test: a test that patches its rules
    never leaves its answers to the next."""
    yield
    from workbench import settle

    settle.forget()
