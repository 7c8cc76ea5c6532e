"""llama_cpp itself: the one import of the library, its log captured, and the batch every decode fills.

As llama-cpp-python's own ``_internals.py`` wraps the C API for its ``Llama`` class, this module holds what
every llama.cpp call here needs and nothing of the contract: :func:`lib` (the only ``import llama_cpp``),
the log lines llama.cpp writes (:func:`captured`), the model parameters every load uses, and
:func:`fill_batch`, the one writer of a ``llama_batch``.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import re
import sys
from typing import Any, Iterable, Iterator, Sequence

from ... import cpu

_LOG: collections.deque[str] = collections.deque(maxlen=4096)  # recent llama.cpp log lines
_CAPTURE: list[list[str]] = []  # open capture buffers (see captured)
_log_callback = None  # kept referenced: llama.cpp holds the pointer

#: llama.cpp's GGML_MAX_N_THREADS (ggml/include/ggml.h): more threads abort its thread pool (std::bad_alloc).
LLAMA_MAX_THREADS = 512
#: llama.cpp's LLAMA_MAX_SEQ (src/llama-cparams.h): its context refuses more sequences, llama-server more slots.
LLAMA_MAX_SEQ = 256


def check_llama_counts(slots: int, threads: int | None) -> None:
    """llama.cpp's own ceilings on slots and threads, said before it starts (it aborts or allocates past them)."""
    if not 1 <= slots <= LLAMA_MAX_SEQ:
        raise ValueError(f"slots must be 1 to {LLAMA_MAX_SEQ} (llama.cpp's LLAMA_MAX_SEQ), got {slots}")
    if threads is not None and not 1 <= threads <= LLAMA_MAX_THREADS:
        raise ValueError(f"threads must be 1 to {LLAMA_MAX_THREADS} (llama.cpp's GGML_MAX_N_THREADS), got {threads}")


def lib():
    """Import llama_cpp and route its log into ``_LOG`` (printed only with WORKBENCH_LLAMA_VERBOSE)."""
    global _log_callback
    import llama_cpp
    import llama_cpp._logger  # noqa: F401 - installs its own callback on import; ours must come after

    if _log_callback is None:
        verbose = bool(os.environ.get("WORKBENCH_LLAMA_VERBOSE"))

        @llama_cpp.llama_log_callback
        def _cb(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
            line = text.decode(errors="replace")
            _LOG.append(line)
            for buf in _CAPTURE:
                buf.append(line)
            if verbose:
                sys.stderr.write(line)

        _log_callback = _cb
    llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))  # again: other importers may have replaced it
    return llama_cpp


@contextlib.contextmanager
def captured() -> Iterator[list[str]]:
    """The log lines llama.cpp writes while the block runs."""
    lines: list[str] = []
    _CAPTURE.append(lines)
    try:
        yield lines
    finally:
        _CAPTURE.remove(lines)


def load_reason(lines: Sequence[str]) -> str:
    """llama.cpp's own words for a failed model load (e.g. ``unknown model architecture: 'foo'``), from its log."""
    said = [line.strip() for line in lines if "error" in line.lower() or "failed" in line.lower()]
    reasons = [s.split("error loading model: ", 1)[1] for s in said if "error loading model: " in s]
    if reasons:
        return reasons[-1] + " (llama.cpp); give a GGUF file llama.cpp can load"
    if said:
        return "; ".join(said[-2:]) + " (llama.cpp); give a GGUF file llama.cpp can load"
    return "is it a valid GGUF file?"


def decide_extra_buffers(override: bool | None = None) -> cpu.ExtraBuffers:
    """Whether this machine's llama.cpp may load weights into extra buffer types (see :mod:`workbench.cpu`)."""
    system_info = lib().llama_print_system_info().decode(errors="replace")
    return cpu.extra_buffers(cpu.flags(), system_info, override)


def model_params(ll: Any, *, gpu_layers: int = 0, extra: cpu.ExtraBuffers) -> Any:
    """``llama_model_params`` as every llama.cpp load here needs them (the cell and the benchmark's raw arm)."""
    mparams = ll.llama_model_default_params()
    mparams.n_gpu_layers = gpu_layers
    mparams.use_extra_bufts = extra.use
    return mparams


def kv_buffer_bytes(lines: Iterable[str]) -> int | None:
    """llama.cpp's own statement of the KV buffer it allocated ("KV buffer size = X MiB")."""
    total = None
    for line in lines:
        m = re.search(r"KV buffer size\s*=\s*([0-9.]+)\s*MiB", line)
        if m:
            total = (total or 0) + int(float(m.group(1)) * 2**20)
    return total


def offloaded_layers(lines: Iterable[str]) -> tuple[int, int] | None:
    """llama.cpp's own statement of the layers it put on a GPU at load ("load_tensors: offloaded N/M layers to GPU",
    llama.cpp ``src/llama-model.cpp``, ``load_tensors``), as (N, M); None where it said nothing, which it does
    when no GPU backend is there to offload to."""
    found = None
    for line in lines:
        if m := re.search(r"offloaded (\d+)/(\d+) layers to GPU", line):
            found = (int(m.group(1)), int(m.group(2)))
    return found


def fill_batch(batch: Any, tokens: Sequence[int], *, pos0: int, seq_id: int, logits_all: bool = False,
               logits_last: bool = True) -> None:
    """Write ``tokens`` into ``batch`` at positions ``pos0``… of sequence ``seq_id``: logits for every token
    (``logits_all``) or for the last one only (``logits_last``). ``tokens`` must fit the batch."""
    n = len(tokens)
    for i, t in enumerate(tokens):
        batch.token[i] = t
        batch.pos[i] = pos0 + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq_id
        batch.logits[i] = 1 if logits_all else 0
    batch.logits[n - 1] = 1 if logits_last or logits_all else 0
    batch.n_tokens = n
