"""TensorRT-LLM's server (``trtllm-serve`` 1.2) as a served cell: its launch line, its identity and the cell."""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterator, Mapping

from ... import models
from ...contract import Description, KvEvent, Retention, UnsupportedFeature
from ...serve import Launch, ServerRequest
from .. import Availability
from ..request import DEFAULT_CONTEXT_TOKENS, Slot, Step, Warm
from ..served import ServedCell
from ..served_id import Answer, Mismatch, ServerId, pick


@dataclass(frozen=True)
class TrtllmServeId(ServerId):
    """trtllm-serve 1.2's ``/version`` (``{"version": …}``), ``/v1/models`` (``ModelCard``, owned_by
    ``tensorrt_llm``) and ``/server_info`` (1.2: ``{"disaggregated_params": …}``; 1.3+ adds the KV fields), as
    1.2-era ``tensorrt_llm/serve/openai_server.py`` registers them."""

    label: ClassVar[str] = "trtllm-serve"
    paths: ClassVar[tuple[str, ...]] = ("/version", "/v1/models", "/server_info")
    owner: ClassVar[str] = "tensorrt_llm"

    version: str
    served_model: str
    server_info: Mapping[str, Any]

    @classmethod
    def read(cls, answers: Mapping[str, Answer]) -> "TrtllmServeId":
        version = pick(answers["/version"], "version", str)
        served = pick(answers["/v1/models"], "data.0.id", str)
        cls.check_owner(answers)
        info = answers["/server_info"].doc()
        if not isinstance(info, dict):
            raise Mismatch(answers["/server_info"], "a JSON object")
        return cls(version=version, served_model=served, server_info=info)


TRTLLM_OPTIONS = "trtllm-options.yaml"


def launch(req: ServerRequest, port: int, folder: Path) -> Launch:
    """``trtllm-serve`` 1.2 (PyTorch backend), written against the 1.2-era ``tensorrt_llm/commands/serve.py``
    and ``llmapi/llm_args.py``: block reuse and KV events on, per-request perf metrics for ``/perf_metrics``
    (its ``kv_cache_metrics`` give each request's reused blocks). Not run on this machine (no NVIDIA GPU)."""
    binary = shutil.which("trtllm-serve") or str(Path(sys.executable).parent / "trtllm-serve")
    o = req.options
    options = "\n".join([
        "kv_cache_config:",
        "  enable_block_reuse: true",
        f"  event_buffer_max_size: {int(o.get('event_buffer_max_size', 1024))}",
        *([f"  tokens_per_block: {int(o['tokens_per_block'])}"] if o.get("tokens_per_block") else []),
        "return_perf_metrics: true",
        f"perf_metrics_max_requests: {int(o.get('perf_metrics_max_requests', 1000))}",
        "",
    ])
    argv = [binary, req.model_path, "--host", req.host, "--port", str(port), "--backend", "pytorch",
            "--max_seq_len", str(req.context_tokens), "--max_batch_size", str(max(req.slots, 1)),
            "--extra_llm_api_options", str(folder / TRTLLM_OPTIONS)]
    return Launch(tuple(argv + list(req.extra_args)), {}, {TRTLLM_OPTIONS: options})


class TrtllmServeCell(ServedCell):
    """``trtllm-serve`` 1.2 (PyTorch backend), written against the 1.2-era ``tensorrt_llm/serve/openai_server.py``:
    completions with token-id prompts and ``cache_salt``; reuse from ``GET /perf_metrics`` (destructive, one
    entry per finished request: ``kv_cache_metrics.num_reused_blocks`` × tokens per block). Not run here:
    tensorrt_llm needs an NVIDIA GPU."""

    engine = "trtllm-serve"
    model_hint = "trtllm-serve runs Hugging Face directories"
    label = "trtllm-serve"
    identity = TrtllmServeId
    launch = staticmethod(launch)
    server_engine = "trtllm"
    prefill_now = True
    TOKENS_PER_BLOCK = 32  # 1.2's KvCacheConfig default; /server_info does not say it before 1.3

    @classmethod
    def availability(cls) -> Availability:
        from .cell import TrtLlmCell

        a = TrtLlmCell.availability()
        reason = a.reason and f"trtllm-serve needs tensorrt_llm: {a.reason}"
        return Availability(cls.engine, a.available, a.version, reason, dict(a.details))

    def _model_path(self) -> Path:
        return models.hf_directory(self.model)

    def _server_options(self) -> dict[str, Any]:
        return {"tokens_per_block": self.TOKENS_PER_BLOCK}

    def _read_server(self) -> None:
        said = self._identify()
        self.version, self.served_model, self.server_info = said.version, said.served_model, said.server_info
        config = models.hf_config(self._model_path())
        self._vocab_size = int(config["vocab_size"])
        self._geometry, ceiling = models.hf_geometry(config)
        self.context_tokens = self.opts.context_tokens or min(ceiling or DEFAULT_CONTEXT_TOKENS, DEFAULT_CONTEXT_TOKENS)

    def _tokenize_remote(self, text: str, special: bool) -> list[int]:
        raise UnsupportedFeature("text prompts", self.engine, "trtllm-serve 1.2 has no /tokenize; send token ids")

    @property
    def _granularity(self) -> int:
        return int(self.server_info.get("tokens_per_block") or self.TOKENS_PER_BLOCK)

    def _capacity_tokens(self) -> int:
        return self.context_tokens * len(self._slots)

    def _body(self, tokens: list[int], key: str | None, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.served_model, "prompt": list(tokens), "max_tokens": max_tokens,
                                "temperature": 0.0}
        if key is not None:
            body["cache_salt"] = key
        return body

    def _reused(self, request_id: str | None) -> tuple[int, dict]:
        """The finished request's ``kv_cache_metrics`` from ``/perf_metrics`` (1.2: drained on read)."""
        entries = self._get("/perf_metrics") or []
        mine = [e for e in entries if request_id is None or str(e.get("request_id")) == str(request_id)] or entries[-1:]
        kv = (mine[-1].get("perf_metrics") or {}).get("kv_cache_metrics", {}) if mine else {}
        return int(kv.get("num_reused_blocks", 0)) * self._granularity, dict(kv)

    def _warm(self, tokens: list[int], key: str, retention: Retention | None, *, slot: int = 0) -> Warm:
        t0 = time.perf_counter()
        doc = self._post("/v1/completions", self._body(tokens, key, 1))
        reused, kv = self._reused(None)
        return Warm(reused, "perf_metrics.kv_cache_metrics", {"kv_cache_metrics": kv, "id": doc.get("id"),
                                                              "prompt_tokens": len(tokens)}, time.perf_counter() - t0)

    def _stream(self, prompt: list[int], st: Slot, sampling: dict[str, Any]) -> Iterator[Step]:
        kw = self._sampling_keywords(**sampling)
        body = self._body(prompt, st.key, int(kw.pop("max_tokens")))
        body.update(kw)
        text, finish = "", None
        for chunk in self._sse("/v1/completions", body):
            for choice in chunk.get("choices") or []:
                piece = choice.get("text") or ""
                text += piece
                finish = choice.get("finish_reason") or finish
                yield Step([int(t) for t in choice.get("token_ids") or []], piece, text, finish, {})
        reused, kv = self._reused(None)
        yield Step([], "", text, finish or "length", {"kv_cache_metrics": kv, "reused_tokens": reused})

    def _context_notes(self, st: Slot) -> list[str]:
        return ["reuse is engine-global block matching keyed by cache_salt, read from /perf_metrics"]

    def describe(self) -> Description:
        self._check_open()
        cap = self._capacity_tokens()
        return Description(
            engine=self.engine, engine_version=self.version, model=self.model.name,
            manifest_digest=self.manifest.digest, geometry=self._geometry, context_tokens=self.context_tokens,
            kv_capacity_tokens=cap, kv_capacity_bytes=cap * self._geometry.bytes_per_token,
            block_tokens=self._granularity, slots=len(self._slots), observers=("request_counters", "kv_events"),
            extra=self._served_extra() | {"server_version": f"tensorrt_llm {self.version}",
                                          "server_info": self.server_info,
                                          # 1.2's one event hash; 1.3+ names it in /server_info
                                          "kv_cache_hash_algo": self.server_info.get("kv_cache_hash_algo")
                                          or "v1_block_key"})

    def drain_kv_events(self, timeout_s: float = 30.0) -> list[KvEvent]:
        """``POST /kv_cache_events`` (``kv_events`` observer): destructive, one shared queue (see
        :mod:`workbench.events.sources`); needs ``event_buffer_max_size > 0`` in the server's options."""
        from .sources import TrtllmHttpSource

        self._check_open()
        return TrtllmHttpSource(self.url, client=self._http).poll(timeout_s)
