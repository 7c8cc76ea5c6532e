"""llama.cpp's own server (llama-server) as a served cell: its launch line, its identity and the cell."""

from __future__ import annotations

import functools
import itertools
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterator, Mapping, Sequence

from ... import models
from ...engine import (ContextOverflow, Description, EngineUnavailable, KvMemory, Retention, UnsupportedFeature,
                         WorkbenchError)
from ...files import tail
from ...serve import Launch, ServerRequest
from .. import Availability
from ..request import Slot, Step, Warm
from ..served import ServedCell, ServedOptions
from ..served_id import Answer, ServerId, pick
from ._internals import check_llama_counts


LLAMA_ABSENT = {
    "eviction": "llama-server never evicts a slot's KV for another request: each slot keeps its own cells and a "
                "prompt longer than the slot's n_ctx is refused (tools/server/server-context.cpp)",
    "retention_priority": "llama-server has no retention priority: nothing is evicted, so there is nothing to order",
    "engine_salt": "llama-server's /completion has no cache salt: a slot reuses its longest common token prefix "
                   "whatever the request (tools/server/server-schema.cpp lists no salt field)",
    "partial_warmup": "an n_predict 0 request returns after the server evaluated the whole prompt into the slot "
                      "(it still samples one token, measured: tokens_cached is the prompt's length); there is no "
                      "block store that could lag behind it (tools/server/server-context.cpp)",
    "kv_events": "llama-server has no KV event stream and no block hashes: a slot reuses its longest common token "
                 "prefix, seen only as timings.cache_n per request (tools/server/server-task.h, result_timings)",
}


@dataclass(frozen=True)
class LlamaServerId(ServerId):
    """llama-server's ``/props`` and ``/v1/models`` (tools/server/server-context.cpp)."""

    label: ClassVar[str] = "llama-server"
    paths: ClassVar[tuple[str, ...]] = ("/props", "/v1/models")
    owner: ClassVar[str] = "llamacpp"

    build_info: str
    slot_ctx: int  # default_generation_settings.n_ctx: one slot's context
    total_slots: int
    eos_token: str
    model_path: str | None
    n_vocab: int | None
    n_ctx_train: int | None

    @classmethod
    def read(cls, answers: Mapping[str, Answer]) -> "LlamaServerId":
        props, card = answers["/props"], answers["/v1/models"]
        out = cls(build_info=pick(props, "build_info", str, "unknown"),
                  slot_ctx=pick(props, "default_generation_settings.n_ctx", int),
                  total_slots=pick(props, "total_slots", int, 1), eos_token=pick(props, "eos_token", str, ""),
                  model_path=pick(props, "model_path", str, None), n_vocab=pick(card, "data.0.meta.n_vocab", int, None),
                  n_ctx_train=pick(card, "data.0.meta.n_ctx_train", int, None))
        cls.check_owner(answers)
        return out

@dataclass(frozen=True)
class LlamaServerOptions(ServedOptions):
    """``open_cell("llamacpp-server", model, **options)``: the served keywords and llama.cpp's layer offload."""

    gpu_layers: int | None = None  # -ngl, a negative count for all layers (-ngl all); None: the server's default

    def __post_init__(self) -> None:
        super().__post_init__()
        check_llama_counts(self.slots, self.threads)


LLAMA_SERVER_ENV = "WORKBENCH_LLAMA_SERVER"  # a llama-server binary to use instead of the one make setup built


def llama_server_binary() -> str | None:
    """``$WORKBENCH_LLAMA_SERVER``, the copy ``make setup`` linked beside this Python, or one on PATH."""
    for cand in (os.environ.get(LLAMA_SERVER_ENV), str(Path(sys.executable).parent / "llama-server"),
                 shutil.which("llama-server")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


@functools.cache
def llama_server_version(binary: str) -> str | None:
    """What ``binary --version`` says it is (``0.5.0-dev (build 1, commit 0c1e570)``); None if it says nothing."""
    try:
        said = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"^version:\s*(.+)$", said.stdout + said.stderr, re.MULTILINE)
    return found.group(1).strip() if found else None


def launch(req: ServerRequest, port: int, folder: Path) -> Launch:
    """llama-server (tools/server): ``-np`` slots of ``-c``/``-np`` tokens each, prompt cache on by default,
    ``/slots`` and ``/metrics`` on, the host-RAM prompt cache off. ``options``: ``no_repack`` (AMX builds on AMX
    CPUs, see cpu.py), ``cache_ram_mib`` (the prompt cache's size; 0: off), ``slot_save_path`` (a folder: the
    slot save, restore and erase routes on, each saved slot a sequence state file there), ``gpu_layers`` (``-ngl``;
    negative: all layers, ``-ngl all``; none: the server's own default)."""
    binary = llama_server_binary()
    if binary is None:
        raise EngineUnavailable("llamacpp-server", "no llama-server binary: `make setup` builds it from the pinned "
                                f"llama-cpp-python sdist; or set {LLAMA_SERVER_ENV} to one")
    argv = [binary, "-m", req.model_path, "--host", req.host, "--port", str(port), "-np", str(req.slots),
            "-c", str(req.context_tokens * req.slots), "-t", str(req.threads), "-tb", str(req.threads),
            "--slots", "--metrics", "--no-webui"]
    # the host-RAM prompt cache (--cache-ram, default 8 GiB) restores other requests' KV into a slot: off
    # unless asked for, so a slot holds its own sequence and reuse can be predicted from the tokens sent
    argv += ["--cache-ram", str(int(req.options.get("cache_ram_mib", 0)))]
    if req.options.get("no_repack"):
        argv.append("--no-repack")
    if (layers := req.options.get("gpu_layers")) is not None:  # its -ngl takes "all"; -1 would be "auto"
        argv += ["-ngl", "all" if int(layers) < 0 else str(int(layers))]
    if req.options.get("slot_save_path"):
        argv += ["--slot-save-path", str(req.options["slot_save_path"])]
    # the key in its environment (common/arg.cpp: --api-key's env LLAMA_API_KEY), never in its command line, which
    # every local user reads in `ps`, nor in the command line its log starts with
    env = {"LLAMA_API_KEY": req.api_key} if req.api_key else {}
    # SIGKILL on its starter's death: llama-server's SIGTERM handler stops its task queue and then joins its HTTP
    # threads, which never ends while a request is in flight (seen in a full test run here: a server left running
    # 7 min after its run was stopped mid-probe); it has no children and nothing to flush
    return Launch(tuple(argv + list(req.extra_args)), env, death_signal=signal.SIGKILL, refused_args=REFUSED_ARGS)


#: llama-server's words for a command line it refuses (common/arg.cpp: ``common_params_parse``), then exit 1
REFUSED_ARGS = r"error: invalid argument: \S+|error while handling argument [^\n]*"


class LlamaServerCell(ServedCell):
    """llama.cpp's own server. Slots are the server's (``id_slot``); reuse is each slot's common token prefix,
    counted by the server (``timings.cache_n``)."""

    engine = "llamacpp-server"
    runs_gguf = True
    model_hint = "llama-server runs GGUF files; use a .gguf path or a synthetic spec"
    label = "llama-server"
    identity = LlamaServerId
    launch = staticmethod(launch)
    server_engine = "llamacpp"
    prefill_now = True

    @classmethod
    def availability(cls) -> Availability:
        binary = llama_server_binary()
        if binary is None:
            return Availability(cls.engine, False, None,
                                "no llama-server binary: `make setup` builds it from the pinned llama-cpp-python "
                                f"sdist into ~/.cache/workbench/; or set {LLAMA_SERVER_ENV} to one")
        return Availability(cls.engine, True, llama_server_version(binary), None, {"binary": binary})

    def _server_options(self) -> dict[str, Any]:
        # the server's --slot-save-path (kv_memory reads the slot files there): in the temp folder, which a command
        # points at its own temp root (workbench.lifecycle), removed on every way out, a driver killed outright
        # included (beside the log it was left behind, empty, by a server stopped by a signal); close() removes it
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="llama-slots-")
        return {"no_repack": self._no_repack, "slot_save_path": self._tmp, "gpu_layers": self.opts.gpu_layers}

    def _start(self) -> None:
        """Start (or attach); a server whose build has AMX on an AMX CPU is restarted with ``--no-repack``,
        the AMX workaround (:mod:`workbench.cpu`), decided from the system info the server logs. The layers it put
        on a GPU are read from its log too (llama.cpp's "offloaded N/M layers to GPU"); a server attached to is
        not read, so it is not counted as on a GPU."""
        from ... import cpu
        from ._internals import offloaded_layers

        o = self.opts
        budget = o.kv_budget_tokens
        if o.kv_budget_bytes is not None:  # llama-server takes -c in tokens: the bytes in the GGUF's KV per token
            budget = o.kv_budget_bytes // models.gguf_geometry(self.model.path)[0].bytes_per_token
        if budget is not None and o.context_tokens is None:
            self.context_tokens = max(budget // o.slots, 1)
        self._no_repack, self._offloaded = False, None
        super()._start()
        if self.server is not None:
            info = next((x for x in tail(self.server.log_path, 10_000) if "system_info" in x), "")
            self.extra_buffers = cpu.extra_buffers(cpu.flags(), info)
            if not self.extra_buffers.use:
                self._stop()
                self._no_repack = True
                super()._start()
            self._offloaded = offloaded_layers(tail(self.server.log_path, 10_000))

    def _read_server(self) -> None:
        self.props = self._identify()
        self._vocab_size = self.props.n_vocab or None
        self.version = self.props.build_info
        self.slot_ctx = self.props.slot_ctx
        self.context_tokens = self.slot_ctx
        self.eog = self._end_tokens()
        total = self.props.total_slots
        if total < len(self._slots):
            raise WorkbenchError(f"the server at {self.url} has {total} slot(s), the cell asked for {len(self._slots)}; "
                                 "start it with -np N")

    def _tokenize_remote(self, text: str, special: bool) -> list[int]:
        return [int(t) for t in self._post("/tokenize", {"content": text, "add_special": special,
                                                         "parse_special": True})["tokens"]]

    END_PIECES = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "<end_of_turn>")

    def _end_tokens(self) -> frozenset[int]:
        """Token ids that end generation: the model's EOS (``/props`` ``eos_token``) and the usual end-of-turn
        pieces where the vocabulary has them as one token. llama-server streams the end token it stopped
        at; the contract's tokens (like the in-process cell's) leave it out."""
        out = set()
        for piece in {self.props.eos_token, *self.END_PIECES} - {""}:
            toks = self._tokenize_remote(piece, False)
            if len(toks) == 1:
                out.add(toks[0])
        return frozenset(out)

    def _chat_tokens(self, messages: list, *, continuation: bool) -> list[int]:
        text = self._post("/apply-template", {"messages": messages, "add_generation_prompt": not continuation})["prompt"]
        return self._tokenize_remote(text, not continuation)

    @property
    def _granularity(self) -> int:
        return 1

    def _capacity_tokens(self) -> int:
        return self.slot_ctx

    def _body(self, tokens: list[int], slot: int, n_predict: int, cache: bool = True) -> dict[str, Any]:
        return {"prompt": list(tokens), "n_predict": n_predict, "cache_prompt": cache, "id_slot": slot,
                "return_tokens": True, "temperature": 0.0}

    def _warm(self, tokens: list[int], key: str, retention: Retention | None, *, slot: int = 0) -> Warm:
        """``n_predict: 0`` into the cell's slot; ``timings.cache_n`` is the prompt tokens the slot reused.

        llama-server has no salt, so manifest-keyed validity is the cell's: when the slot's key changes, the
        warm-up goes with ``cache_prompt: false`` and the server recomputes the whole prompt."""
        t0 = time.perf_counter()
        doc = self._post("/completion", self._body(tokens, slot, 0, cache=self._slots[slot].key == key))
        counters = self._counters(doc, len(tokens))
        return Warm(int(counters["cache_n"]), "timings.cache_n", counters, time.perf_counter() - t0)

    def _stream(self, prompt: list[int], st: Slot, sampling: dict[str, Any]) -> Iterator[Step]:
        kw = self._sampling_keywords(**sampling)
        body = self._body(prompt, self._slot_index(st), int(kw.pop("max_tokens")))
        body.update({k: v for k, v in kw.items() if k in ("seed", "temperature", "top_p", "top_k", "stop")})
        if sampling.get("json_schema") is not None:
            body["json_schema"] = dict(sampling["json_schema"])
        text, seen, streamed, ends, held = "", 0, 0, 0, False
        for chunk in self._sse("/completion", body):
            piece = chunk.get("content") or ""
            text += piece
            done = bool(chunk.get("stop"))
            raw = [int(t) for t in chunk.get("tokens") or []]
            tokens = [t for t in raw if t not in self.eog]
            # tokens_predicted counts every token; a token that ends inside a UTF-8 character is not streamed
            # (its id never comes: tools/server/server-context.cpp, process_token), so count what arrived
            total = int(chunk.get("tokens_predicted", seen + len(raw)))
            arrived = max(total - seen - (len(raw) - len(tokens)), len(tokens))
            seen, streamed, held = total, streamed + len(tokens), held or arrived > len(tokens)
            ends += len(raw) - len(tokens)
            if not (tokens or arrived or done):
                continue
            if not done:
                yield Step(tokens, piece, text, None, {}, arrived=arrived)
                continue
            finish = "length" if chunk.get("stop_type") == "limit" else "stop"
            complete = None
            if held:  # the same greedy (or seeded) request, not streamed, returns every id; the times stay the stream's
                again = self._post("/completion", dict(body, stream=False))
                complete = [int(t) for t in again.get("tokens") or [] if int(t) not in self.eog]
            counters = self._counters(chunk, len(prompt)) | {"stream_held_tokens": seen - streamed - ends}
            yield Step(tokens, piece, text, finish, counters, arrived=arrived, complete=complete)

    @staticmethod
    def _counters(doc: Mapping[str, Any], prompt: int) -> dict:
        t = doc.get("timings") or {}
        out = {"cache_n": int(t.get("cache_n", 0)), "prompt_n": int(t.get("prompt_n", 0)),
               "predicted_n": int(t.get("predicted_n", 0)), "prompt_tokens": prompt,
               "prompt_ms": t.get("prompt_ms"), "predicted_ms": t.get("predicted_ms")}
        for k in ("draft_n", "draft_n_accepted"):
            if k in t:
                out[k] = int(t[k])
        for k in ("tokens_cached", "tokens_evaluated"):
            if k in doc:
                out[k] = int(doc[k])
        return out

    def _context_notes(self, st: Slot) -> list[str]:
        notes = ["reuse is llama-server's per-slot longest common token prefix (id_slot pins the slot); "
                 "the last prompt token is always evaluated again",
                 "no cache salt in the server: the cell sends cache_prompt false when a slot's key changes"]
        if st.counters:
            notes.append(f"last request: timings.cache_n {st.counters.get('cache_n')} of {st.counters.get('prompt_tokens')}")
        return notes

    def measure_capacity(self, *, step: int | None = None, slot: int = 0) -> int:
        """Prompt tokens slot ``slot`` really takes (``capacity`` observer), filled over HTTP until the server refuses.

        A prompt of seeded token ids is sent with ``n_predict: 0``, doubled from ``step`` (default 256) until the
        server refuses it (400 ``exceed_context_size_error``: a prompt of the slot's n_ctx tokens or more,
        tools/server/server-context.cpp), then halved back to the longest it takes; each prompt extends the one
        before, so the slot evaluates only the new tokens. The count is the server's ``tokens_cached``; the slot
        is erased after (``POST /slots/{id}?action=erase``), where the server has a --slot-save-path."""
        self._check_open()
        if self._slots[slot].tokens:
            raise WorkbenchError(f"measure_capacity needs slot {slot} empty")
        if not self._vocab_size:
            raise UnsupportedFeature("capacity measurement", self.engine, "/v1/models states no n_vocab to draw ids from")
        rng = random.Random(12345)
        fresh = (t for t in iter(lambda: rng.randrange(self._vocab_size), None) if t not in self.eog)
        ids: list[int] = []

        def taken(n: int) -> int | None:
            ids.extend(itertools.islice(fresh, max(n - len(ids), 0)))
            return self._taken(ids[:n], slot)

        lo, hi, held = 0, max(step or 256, 1), 0
        while (got := taken(hi)) is not None:
            if hi > 1 << 24:
                raise WorkbenchError(f"{self.url} took {hi:,} prompt tokens into one slot and never refused")
            lo, hi, held = hi, 2 * hi, got
        while hi - lo > 1:
            mid = (lo + hi) // 2
            got = taken(mid)
            lo, hi, held = (mid, hi, got) if got is not None else (lo, mid, held)
        if self._slot_folder() is not None:
            self._post(f"/slots/{slot}?action=erase", {})
        return held

    def _taken(self, prompt: list[int], slot: int) -> int | None:
        """The server's ``tokens_cached`` after it evaluated ``prompt`` into ``slot``; None: it refused the prompt."""
        try:
            return int(self._post("/completion", self._body(prompt, slot, 0))["tokens_cached"])
        except ContextOverflow:
            return None

    def _slot_folder(self) -> Path | None:
        """Where the server writes saved slots: the last --slot-save-path it was started with (the cell's own, or
        one in ``server_args``); None for a server the cell attached to, whose disk is not this cell's."""
        args = list(self.server.argv) if self.server is not None else []
        at = [i for i, a in enumerate(args[:-1]) if a == "--slot-save-path"]
        return Path(args[at[-1] + 1]) if at else None

    def kv_memory(self) -> KvMemory:
        """The engine's own K and V row sizes (``capacity`` observer): the server saves slot 0
        (``POST /slots/0?action=save``, ``llama_state_seq_save_file`` into its --slot-save-path) and the one state
        reader walks that file (:func:`.llamacpp.state.parse_seq_file`); an empty slot first takes one token and is
        erased again. No pool bytes: llama-server states none (its log's "KV buffer size" is rounded to 0.01 MiB)."""
        from .state import parse_seq_file

        self._check_open()
        folder = self._slot_folder()
        if folder is None:
            raise UnsupportedFeature("KV bytes", self.engine, "llama-server states them only in a saved slot file, "
                                     "written to its own --slot-save-path; an attached server's disk is not readable "
                                     "here (open the cell without endpoint=)")
        scratch = not self._slots[0].tokens
        if scratch:
            self._post("/completion", self._body([next(t for t in range(self._vocab_size or 2) if t not in self.eog)],
                                                 0, 0, cache=False))
        name = f"workbench-kv-{os.getpid()}-{time.time_ns()}.bin"
        try:
            self._post("/slots/0?action=save", {"filename": name})
            state = parse_seq_file((folder / name).read_bytes())
        finally:
            (folder / name).unlink(missing_ok=True)
            if scratch:
                self._post("/slots/0?action=erase", {})
        if state.row_bytes is None:
            raise WorkbenchError(f"the slot file {self.url} saved for slot 0 holds no K/V rows; cannot read their sizes")
        return KvMemory(bytes_per_token=state.row_bytes, pool_bytes=None,
                        how="the K and V row sizes (every layer) in the sequence state file llama-server wrote for "
                            "slot 0 (POST /slots/0?action=save, llama_state_seq_save_file)")

    def slots(self) -> list[dict]:
        """The server's own view of its slots (``GET /slots``)."""
        self._check_open()
        return list(self._get("/slots"))

    def describe(self) -> Description:
        self._check_open()
        path = Path(self.props.model_path or self.model.path)
        geometry, _, _ = models.gguf_geometry(path if path.is_file() else self.model.path)
        total = self.props.total_slots
        return Description(
            engine=self.engine, engine_version=self.version, model=self.model.name,
            manifest_digest=self.manifest.digest, geometry=geometry, context_tokens=self.slot_ctx,
            kv_capacity_tokens=self.slot_ctx * total, kv_capacity_bytes=self.slot_ctx * total * geometry.bytes_per_token,
            block_tokens=1, slots=len(self._slots), observers=("request_counters", "capacity"), absent=LLAMA_ABSENT,
            extra=self._served_extra() | {
                "server_version": f"llama-server {self.version}", "build_info": self.version, "total_slots": total,
                "slot_n_ctx": self.slot_ctx, "model_path": self.props.model_path,
                "n_ctx_train": self.props.n_ctx_train,
                "reuse_counters": "timings.cache_n per request (prompt tokens served from the slot's cache)",
                "kv_readback": "none: llama-server's HTTP API does not read KV back",
                "speculation": _spec_args(self.server.argv if self.server else ()),
                "extra_buffers": None if self.server is None else self.extra_buffers.use,
                "extra_buffers_reason": None if self.server is None else self.extra_buffers.reason,
                "offloaded_layers": list(self._offloaded) if self._offloaded else None,  # its log's N/M
            })


def _spec_args(argv: Sequence[str]) -> dict[str, str]:
    """The speculation flags a llama-server was started with."""
    out, args = {}, list(argv)
    for i, a in enumerate(args):
        if a.startswith("--spec-") or a in ("-md", "--draft-max", "--draft-min"):
            out[a] = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else "on"
    return out
