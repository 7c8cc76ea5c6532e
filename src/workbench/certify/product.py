"""The product path as it stands: contenox v1.0.0 retired modeld, and what replaced it, with the sources.

Read at contenox/contenox ``2f653670f782b0cda42009fa622b761471d5eabb`` ("Release v1.0.0", 2026-08-20; :data:`V1`) and
the blueprints' retired README at ``7ffadb05`` (summarised in ``shared/reference/contenox-sources.md`` §6). The
blueprint's gates describe the path ``contenox-runtime binary -> modeld launcher -> backend adapter -> runtime``
(benchmark-integrity, "Core Rule"); the released product no longer ships it. A researcher reading the written-back
blueprint learns that here (:func:`note`), next to how this workbench measures the shape that replaced it: the eval
table (``workbench evaltable``) drives ``trtllm-serve`` (on a GPU), ``vllm serve`` and ``llama-server`` as that backend
does, OpenAI chat completions streamed with ``stream_options.include_usage`` and the cached prompt tokens read from
``usage.prompt_tokens_details.cached_tokens``, and labels every row ``raw_backend_control``: AIPerf drove them, no
contenox runtime did. Nothing here is ``contenox_product_path`` unless a contenox runtime drove it
(:data:`.classes.PRODUCT_DRIVER`: its version, command and trace digest); what the note says of that is read from the
run's findings (:func:`product_path`), never stated.
"""

from __future__ import annotations

from typing import Any, Sequence

V1 = "contenox/contenox@2f653670f782b0cda42009fa622b761471d5eabb (v1.0.0)"
C7 = "contenox/contenox@7ffadb057304ecf3b8685b68fd8646657a23804f"

FACTS: tuple[tuple[str, str], ...] = (
    ("modeld is retired: the release describes it in the past tense (\"`modeld` was Contenox's dedicated local "
     "inference daemon\")", f"{V1} docs/rnd/modeld.md"),
    ("\"V1 delegates local inference to Ollama or vLLM, which do that job full-time\"",
     f"{C7} docs/development/blueprints/retired/README.md"),
    ("the backend validator accepts the types ollama, vllm, openai, anthropic, bedrock, gemini, vertex-google and "
     "scripted-test, and rejects localnode, llama, openvino, modeld and local",
     f"{V1} internal/models/backendservice/backendservice.go:100, backendservice_test.go:28 "
     "(TestUnit_BackendService_ValidateRejectsRetiredLocalNodeType)"),
    ("the GPU path is an OpenAI-compatible backend of type vllm: POST /v1/chat/completions, streamed requests with "
     "stream_options.include_usage, usage read as prompt_tokens and completion_tokens only",
     f"{V1} internal/models/modelrepo/vllm/chat.go:48, client.go:48-57, stream.go:58"),
    ("it maps no cache hint onto the wire (\"vLLM's Automatic Prefix Caching keys on the exact token prefix "
     "server-side\"): no cache_salt, no manifest", f"{V1} internal/models/modelrepo/vllm/client.go:285"),
    ("beside it the openai provider sends prompt_cache_key and reads prompt_tokens_details.cached_tokens",
     f"{V1} internal/models/modelrepo/openai/cache_test.go:78, chat.go:23"),
)

REACH = ("so a TensorRT-LLM cell reaches today's product as trtllm-serve (OpenAI-compatible) registered "
         "`contenox backend add NAME --type vllm --url http://HOST:8000`: no session contract, no PrefixStatus, reuse "
         "by the server's own prefix cache on exact tokens")
SHAPE = ("OpenAI chat completions, streamed with stream_options.include_usage, cached prompt tokens read from "
         "usage.prompt_tokens_details.cached_tokens (the vllm backend's request plus the openai provider's cached-token "
         "read)")


def measured(found: Sequence[tuple[Any, Any]]) -> list[str]:
    """Which backends the run measured in that shape (the eval table's findings), with their class."""
    from .integrity import result_class

    seen: dict[str, str] = {}
    for _, f in sorted(found, key=lambda pf: pf[1].created):
        if f.probe.startswith("evaltable."):
            seen[f.engine] = (f"{f.engine}: {result_class(f)[0]}" + ("" if f.verdict != "not-run" else
                              f" (not run: {(f.reason or f.summary).split(';')[0][:160]})"))
    return list(seen.values())


def product_path(found: Sequence[tuple[Any, Any]]) -> list[Any]:
    """The run's findings labelled ``contenox_product_path`` that the schema admitted (each names the contenox runtime
    that drove it, :func:`.classes.driver_problem`) and that the matrix does not leave out (:func:`.matrix.left_out`)."""
    from . import classes
    from .integrity import result_class
    from .matrix import left_out

    return [f for _, f in found if result_class(f)[0] == classes.ResultClass.PRODUCT.value
            and not classes.driver_problem((f.environment or {}).get(classes.PRODUCT_DRIVER)) and not left_out(f)]


def product_words(found: Sequence[tuple[Any, Any]]) -> str:
    """What the run's findings say of the product path: none of them is ``contenox_product_path``, or which are and
    the contenox runtime that drove each."""
    from .classes import PRODUCT_DRIVER

    got = product_path(found)
    if not got:
        return "Nothing here is `contenox_product_path`: no finding of this run names a contenox runtime that drove it."
    drove = sorted({f"{f.engine} by contenox {d['version']} (`{d['command']}`, trace {d['trace_sha256'][:12]}…)"
                    for f in got for d in [f.environment[PRODUCT_DRIVER]]})
    return (f"{len(got)} finding{'s' if len(got) != 1 else ''} of this run "
            f"{'are' if len(got) != 1 else 'is'} `contenox_product_path`: {'; '.join(drove)}.")


def note(found: Sequence[tuple[Any, Any]] = ()) -> list[str]:
    """The blueprint's product-path note, as Markdown lines."""
    lines = ["**The product path as it stands.** The gates above describe `contenox-runtime → modeld launcher → "
             "backend adapter → runtime`; the released product no longer has that path:", ""]
    lines += [f"- {fact} ({where})." for fact, where in FACTS]
    lines += [f"- {REACH[0].upper() + REACH[1:]}.", ""]
    got = measured(found)
    lines.append("The workbench measures that shape with its eval table (`workbench evaltable`): trtllm-serve on a GPU, "
                 f"vllm serve and llama-server, each as {SHAPE}, every row `raw_backend_control` (AIPerf drove it, not a "
                 f"contenox runtime). {product_words(found)}"
                 + (f" This run: {'; '.join(got)}." if got else " This run measured no backend in that shape."))
    return lines


__all__ = ["C7", "FACTS", "REACH", "SHAPE", "V1", "measured", "note", "product_path", "product_words"]
