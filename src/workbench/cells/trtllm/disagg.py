"""TensorRT-LLM 1.2's disaggregated serving as the gateway's P/D wire, and its orchestrator's config.

Written against the 1.2-era source and not run here (tensorrt_llm needs an NVIDIA GPU):

* ``tensorrt_llm/serve/openai_protocol.py``, ``DisaggregatedParams(OpenAIBaseModel)``: ``request_type``
  (``context_only`` | ``generation_only`` | ``context_and_generation``), ``first_gen_tokens``, ``ctx_request_id``,
  ``encoded_opaque_state`` (the LLM API's ``opaque_state`` bytes, base64 in JSON) and ``draft_tokens``; it travels
  in the request body as ``disaggregated_params`` and comes back in ``choices[0].disaggregated_params``;
* ``tensorrt_llm/disaggregated_params.py``, ``DisaggregatedParams`` (the LLM API's dataclass the server converts it
  to; ``get_request_type`` maps the string to ``tllme.RequestType``);
* ``tensorrt_llm/serve/openai_disagg_service.py`` (the orchestrator ``trtllm-serve disaggregated`` runs;
  ``openai_disagg_server.py`` serves it): the context request is the client's copy with ``disaggregated_params =
  DisaggregatedParams(request_type="context_only")``, ``stream=False`` and no ``stream_options``
  (``_get_ctx_request``); generation is skipped when the context finish reason is not ``length``/``not_finished``
  (``_need_gen``); otherwise the client's request gets the context answer's ``disaggregated_params`` with
  ``request_type="generation_only"`` (``_get_gen_request``);
* ``tensorrt_llm/llmapi/disagg_utils.py`` (``parse_disagg_config_file``): the orchestrator's YAML, ``hostname``,
  ``port``, ``backend``, ``context_servers``/``generation_servers`` each with ``num_instances`` and ``urls``;
* ``tensorrt_llm/llmapi/llm_args.py``, ``CacheTransceiverConfig``: ``backend`` (``DEFAULT`` | ``UCX`` | ``NIXL``
  | ``MOONCAKE`` | ``MPI``) and ``max_tokens_in_buffer``, in each worker's ``--extra_llm_api_options`` YAML
  (examples/disaggregated/README.md; a context worker also sets ``disable_overlap_scheduler: true``).

The KV travels between GPUs through the transceiver, never through files: there is no store to zero, so the
zeroed-store control does not apply (:meth:`TrtllmWire.store` is None).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from ...engine import UnsupportedFeature
from ...gateway.pd import Counts


class TrtllmWire:
    """trtllm-serve's OpenAI protocol for the two legs (the orchestrator's own, so the gateway's relay and
    ``trtllm-serve disaggregated`` send the workers the same requests)."""

    def cell_options(self, role: str, store: str) -> dict:
        """A worker's side: its ``--extra_llm_api_options`` written into ``store`` (:func:`worker_options`), passed
        after the cell's own so that it is the one trtllm-serve reads."""
        path = Path(store) / f"{role}.yml"
        path.write_text(worker_options(role))
        return {"server_args": ("--extra_llm_api_options", str(path))}

    def request(self, served_model: str, tokens: list[int], max_tokens: int, salt: str | None, **more: Any) -> dict:
        body = {"model": served_model, "prompt": list(tokens), "max_tokens": max_tokens, "temperature": 0.0} | more
        return body if salt is None else body | {"cache_salt": salt}

    def counts(self, metrics_text: str) -> Counts:
        """1.2's ``/metrics`` is the iteration stats (JSON), with no per-endpoint transfer counter: what the
        generation worker received is read from its ``/perf_metrics`` instead (``kv_cache_size``, the transfer's
        ``kv_cache_transfer_start``/``end``), not mapped yet."""
        raise UnsupportedFeature("a per-endpoint KV transfer counter", "trtllm-serve",
                                 "1.2 reports the transfer per request in /perf_metrics (timing_metrics "
                                 "kv_cache_transfer_start/end and kv_cache_size, bytes), not as tokens: not mapped yet")

    def transferable(self, prompt_tokens: int, block_size: int) -> int:
        """The context phase's whole KV (every prompt token) crosses to the generation worker."""
        return prompt_tokens

    def store(self, root: str) -> None:
        return None

    def context_body(self, body: Mapping[str, Any]) -> dict:
        out = dict(body, disaggregated_params={"request_type": "context_only"}, stream=False)
        out.pop("stream_options", None)
        return out

    def state(self, doc: Mapping[str, Any]) -> Any:
        return ((doc.get("choices") or [{}])[0]).get("disaggregated_params")

    def generation_body(self, body: Mapping[str, Any], state: Any) -> dict:
        if not isinstance(state, Mapping):
            raise ValueError(f"the context server returned no disaggregated_params (got {state!r}); "
                             "trtllm-serve's orchestrator refuses such an answer too")
        return dict(body, disaggregated_params=dict(state, request_type="generation_only"))


def transceiver(backend: str = "DEFAULT", max_tokens_in_buffer: int | None = None) -> dict:
    """``cache_transceiver_config`` for a worker's ``--extra_llm_api_options``."""
    if backend not in ("DEFAULT", "UCX", "NIXL", "MOONCAKE", "MPI"):
        raise ValueError(f"cache_transceiver_config backend must be DEFAULT, UCX, NIXL, MOONCAKE or MPI, got {backend!r}")
    return {"backend": backend} | ({"max_tokens_in_buffer": int(max_tokens_in_buffer)} if max_tokens_in_buffer else {})


def worker_options(role: str, backend: str = "DEFAULT") -> str:
    """A P/D worker's ``--extra_llm_api_options`` YAML (examples/disaggregated/README.md): the transceiver on both
    sides, the overlap scheduler off on the context side, block reuse and per-request perf metrics kept on."""
    if role not in ("context", "generation"):
        raise ValueError(f"role must be context or generation, got {role!r}")
    doc = {"cache_transceiver_config": transceiver(backend), "kv_cache_config": {"enable_block_reuse": True},
           "return_perf_metrics": True} | ({"disable_overlap_scheduler": True} if role == "context" else {})
    return "\n".join(f"{k}: {json.dumps(v)}" for k, v in doc.items()) + "\n"  # JSON values are YAML flow values


def orchestrator_config(context_urls: Sequence[str], generation_urls: Sequence[str], *, host: str = "127.0.0.1",
                        port: int = 8000) -> str:
    """The YAML ``trtllm-serve disaggregated -c`` reads (``parse_disagg_config_file``): each side's ``urls``
    as ``host:port``."""
    def side(urls: Sequence[str]) -> dict:
        bare = [u.split("://", 1)[-1].rstrip("/") for u in urls]
        return {"num_instances": len(bare), "urls": bare}

    doc = {"hostname": host, "port": int(port), "backend": "pytorch",
           "context_servers": side(context_urls), "generation_servers": side(generation_urls)}
    return "\n".join(f"{k}: {json.dumps(v)}" for k, v in doc.items()) + "\n"  # JSON values are YAML flow values

