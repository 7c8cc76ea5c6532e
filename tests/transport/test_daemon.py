"""``workbench cell serve`` on the real llama.cpp (SmolLM2-135M): modeld's wire from the client, a clean stop.

What the issue's first "done when" asks, from the command line: Health, OpenSession, EnsurePrefix, PrefillSuffix,
Decode (streamed), ExplainContext answered from the client; a stale fence and an overflow refused in modeld's own
error tokens; SIGTERM stops it with exit 0 and nothing left running.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TINY, require_engine
from workbench.transport import errors as e
from workbench.transport.contract import Config, DecodeConfig, OpenSessionRequest, PrefixInput, SuffixInput
from workbench.transport.manifest import ManifestIdentity, chat_turn
from workbench.transport.wire import Client, RemoteSession

pytestmark = pytest.mark.slow
SRC = Path(__file__).resolve().parents[2] / "src"


def _workbench(*args: str) -> list[str]:
    return [sys.executable, "-c", "from workbench.cli import main; main()", *args]


def _env() -> dict:
    return os.environ | {"PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}


@pytest.fixture(scope="module")
def daemon():
    require_engine("llamacpp")
    proc = subprocess.Popen(_workbench("cell", "serve", "--engine", "llamacpp", "--model", "smollm2-135m", "--ctx",
                                       "512", "--threads", "1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(), start_new_session=True)
    line = proc.stdout.readline()
    m = re.search(r"at 127\.0\.0\.1:(\d+)", line)
    assert m, line + proc.stderr.read() if proc.poll() is not None else line
    yield proc, int(m.group(1))
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_the_cell_answers_a_turn_on_modelds_wire_and_refuses_in_modelds_tokens(daemon):
    _, port = daemon
    client = Client("127.0.0.1", port)
    try:
        h = client.health()
        assert h.backend == "llama" and h.instance_id.startswith("wb-")
        sess = client.open_session(OpenSessionRequest(config=Config(num_ctx=256)))
        s, v, m = chat_turn([("system", "You answer in one word."), ("user", "Name a colour.")], 1,
                            ManifestIdentity(backend="llama", add_bos=True))
        first = sess.ensure_prefix(PrefixInput(text=s, manifest=m))
        again = sess.ensure_prefix(PrefixInput(text=s, manifest=m))
        assert first.prefilled_tokens == first.prefix_tokens > 0 and again.reused_tokens == first.prefix_tokens
        assert sess.prefill_suffix(SuffixInput(text=v, manifest=m)).suffix_tokens > 0
        chunks = list(sess.decode(DecodeConfig(max_tokens=6, temperature=0.0)))
        assert len(chunks) >= 2 and all(c.error is None for c in chunks)  # streamed frame by frame
        report = sess.explain_context()
        assert report.decode_calls == 1 and report.physical_prefill_calls == 2 and report.residency.capabilities.remove_tail
        stale = Client("127.0.0.1", port, owner="not-the-owner")
        try:
            with pytest.raises(e.ErrStaleFence):
                RemoteSession(stale, sess.handle).ensure_prefix(PrefixInput(text=s, manifest=m))
        finally:
            stale.close()
        small = client.open_session(OpenSessionRequest(config=Config(num_ctx=8)))
        with pytest.raises(e.ContextOverflowError) as got:
            small.ensure_prefix(PrefixInput(text=s, manifest=m))
        assert got.value.overflow.stage == "prefix" and got.value.overflow.num_ctx == 8
    finally:
        client.close()


def test_sigterm_stops_the_daemon_cleanly_with_nothing_left(daemon):
    proc, port = daemon
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    time.sleep(0.2)
    left = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert left == []


def test_a_host_beyond_loopback_without_a_key_is_refused_before_anything_starts():
    r = subprocess.run(_workbench("cell", "serve", "--engine", "llamacpp", "--host", "0.0.0.0"), capture_output=True,
                       text=True, env=_env(), timeout=120)
    assert r.returncode == 2 and "refusing to bind 0.0.0.0 without an API key" in r.stderr
    r = subprocess.run(_workbench("cell", "serve", "--engine", "llamacpp-server"), capture_output=True, text=True,
                       env=_env(), timeout=120)
    assert r.returncode == 2 and "not served as a cell" in r.stderr


THINKING = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and not enable_thinking %}"
            "<think></think>{% endif %}{% if reasoning_effort %}effort: {{ reasoning_effort }}{% endif %}{% endif %}")


def test_enable_thinking_and_reasoning_effort_reach_the_template_over_the_wire():
    """``SuffixInput.EnableThinking`` (false included) and ``ReasoningEffort`` cross the wire and render, as modeld's
    llama cell hands them to the chat template (``llamasession/llama.go`` renderTemplateForDecode): a template that
    reads them gives the suffix more tokens; unset, its own default holds."""
    from workbench.transport.daemon import Daemon

    require_engine("llamacpp")
    with Daemon("llamacpp", "smollm2-135m", options={"context_tokens": 512, "threads": 1}) as d:
        d.service.cell._template = THINKING  # the model's own template, swapped for one that reads the variables
        client = d.client()
        s, v, m = chat_turn([("system", "Be brief."), ("user", "Name a colour.")], 1,
                            ManifestIdentity(backend="llama", add_bos=True))

        def suffix(**kw) -> int:
            sess = client.open_session(OpenSessionRequest())
            try:
                sess.ensure_prefix(PrefixInput(text=s, manifest=m))
                return sess.prefill_suffix(SuffixInput(text=v, manifest=m, **kw)).suffix_tokens
            finally:
                sess.close()

        unset, on, off = suffix(), suffix(enable_thinking=True), suffix(enable_thinking=False)
        assert unset == on < off  # false rendered the empty think block; true and unset did not
        assert suffix(reasoning_effort="high") > unset


def test_the_key_read_from_a_file_guards_the_wire_and_stays_out_of_ps(tmp_path):
    """--api-key-file: the key never on the command line (`ps`); every call but Health needs it; a file with no key
    and a key given twice are refused before anything loads."""
    require_engine("llamacpp")
    key = tmp_path / "key"
    key.write_text("s3cret-cell-key\n")
    proc = subprocess.Popen(_workbench("cell", "serve", "--engine", "llamacpp", "--model", TINY, "--ctx", "256",
                                       "--threads", "1", "--api-key-file", str(key)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(), start_new_session=True)
    try:
        line = proc.stdout.readline()
        m = re.search(r"at 127\.0\.0\.1:(\d+)", line)
        assert m, line + proc.stderr.read() if proc.poll() is not None else line
        assert "s3cret" not in Path(f"/proc/{proc.pid}/cmdline").read_text()
        anyone, owner = Client("127.0.0.1", int(m.group(1))), Client("127.0.0.1", int(m.group(1)),
                                                                     api_key="s3cret-cell-key")
        try:
            assert anyone.health().backend == "llama"
            with pytest.raises(Exception, match="unauthenticated"):
                anyone.status()
            assert owner.status() is not None
        finally:
            anyone.close()
            owner.close()
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    (tmp_path / "empty").write_text("\n")
    for extra, said in ((["--api-key-file", str(tmp_path / "empty")], "give a file whose first line is the key"),
                        (["--api-key", "k", "--api-key-file", str(key)], "not both")):
        r = subprocess.run(_workbench("cell", "serve", "--engine", "llamacpp", *extra), capture_output=True,
                           text=True, env=_env(), timeout=120)
        assert r.returncode == 2 and said in r.stderr, r.stderr
