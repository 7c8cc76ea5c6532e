"""Benchmark: the llama.cpp cell against direct llama-cpp-python on identical work.

Each round is a cold prefill of ``prompt_tokens`` followed by ``decode_tokens`` greedy tokens.
Arms alternate within every round (cell, raw low-level API, high-level ``Llama``), all with the
same model, context size, batch size, thread count (all cores) and extra-buffer setting (the AMX
workaround of :mod:`workbench.cpu`), so machine noise hits them alike; the figure is the median of
per-round ratios. Where the setting in force keeps extra buffers on, a fourth arm runs the cell with
them off, which states what the workaround would cost on this machine. The high-level ``Llama``
cannot turn them off, so it is left out where the workaround is in force. Run it on an idle machine.
"""

from __future__ import annotations

import ctypes
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ... import cpu, environment, models
from ...engine import WorkbenchError
from ...models import TOKEN_LO
from .. import open_cell
from ... import metrics
from ._internals import decide_extra_buffers, model_params


@dataclass
class BenchResult:
    model: str
    prompt_tokens: int
    decode_tokens: int
    rounds: int
    threads: int
    seconds: dict[str, list[float]] = field(default_factory=dict)
    hardware: str = ""
    llama_cpp_version: str = ""
    extra_buffers: bool = True
    extra_buffers_reason: str = ""
    cpu_flags: list[str] = field(default_factory=list)

    def median(self, arm: str) -> float:
        return statistics.median(self.seconds[arm])

    def ratio(self, arm: str, base: str) -> float:
        """Median over rounds of arm/base (paired within a round)."""
        return statistics.median(a / b for a, b in zip(self.seconds[arm], self.seconds[base]))

    def to_dict(self) -> dict:
        return asdict(self) | {f"{arm}_over_{base}": self.ratio(arm, base) for arm, base in self.ratios()}

    def ratios(self) -> list[tuple[str, str]]:
        return [(a, b) for a, b in (("cell", "raw"), ("cell", "llama"), ("cell_xb_off", "cell")) if a in self.seconds
                and b in self.seconds]


class _Raw:
    """The most direct use of llama-cpp-python: low-level context, one batch, greedy sampler."""

    def __init__(self, ll, path: str, n_ctx: int, n_batch: int, threads: int, extra: cpu.ExtraBuffers) -> None:
        self.ll = ll
        mp = model_params(ll, extra=extra)
        self.model = ll.llama_model_load_from_file(path.encode(), mp)
        cp = ll.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, n_batch, n_batch
        cp.n_threads = cp.n_threads_batch = threads
        self.ctx = ll.llama_init_from_model(self.model, cp)
        self.vocab = ll.llama_model_get_vocab(self.model)
        self.smpl = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        ll.llama_sampler_chain_add(self.smpl, ll.llama_sampler_init_greedy())

    def work(self, prompt: list[int], n: int) -> list[int]:
        ll = self.ll
        ll.llama_memory_clear(ll.llama_get_memory(self.ctx), True)
        arr = (ll.llama_token * len(prompt))(*prompt)
        ll.llama_decode(self.ctx, ll.llama_batch_get_one(arr, len(prompt)))
        out = []
        tok = ll.llama_token(0)
        for _ in range(n):
            tok.value = ll.llama_sampler_sample(self.smpl, self.ctx, -1)
            out.append(tok.value)
            if len(out) < n:
                ll.llama_decode(self.ctx, ll.llama_batch_get_one(ctypes.pointer(tok), 1))
        ll.llama_synchronize(self.ctx)
        return out

    def close(self) -> None:
        self.ll.llama_sampler_free(self.smpl)
        self.ll.llama_free(self.ctx)
        self.ll.llama_model_free(self.model)


@dataclass
class _Arms:
    """The benchmark's arms, each one way of serving the same prompt: the cell, raw llama.cpp calls and, where
    extra buffers are in use, llama-cpp-python's high-level ``Llama`` and the cell with extra buffers off."""

    cell: Any
    raw: Any
    llama: Any = None
    cell_xb_off: Any = None

    def work(self, arm: str, prompt: list[int], r: int, decode_tokens: int) -> list[int]:
        if arm == "raw":
            return self.raw.work(prompt, decode_tokens)
        if arm == "llama":
            self.llama.reset()
            out: list[int] = []
            for tok in self.llama.generate(prompt, temp=0.0, top_k=1, reset=True):
                out.append(tok)
                if len(out) == decode_tokens:
                    break
            return out
        c = self.cell if arm == "cell" else self.cell_xb_off
        c.ensure_prefix(prompt, salt=f"bench-{r}")
        return c.decode(max_tokens=decode_tokens).tokens

    def close(self) -> None:
        for c in (self.cell, self.raw, self.llama, self.cell_xb_off):
            if c is not None:
                c.close()


def _rounds(res: BenchResult, served: _Arms, arms: list[str], hi: int) -> None:
    """``res.rounds`` timed rounds after one warm-up (discarded), arms rotated each round; the cell and raw
    calls must decode the same tokens."""
    for r in range(res.rounds + 1):  # round 0 warms every arm up and is discarded
        prompt = [TOKEN_LO + (r * 7919 + i * 104729) % (hi - TOKEN_LO) for i in range(res.prompt_tokens)]
        tokens = {}
        for arm in arms[r % len(arms):] + arms[: r % len(arms)]:  # rotate, so no arm always goes first
            t0 = time.perf_counter()
            tokens[arm] = served.work(arm, prompt, r, res.decode_tokens)
            if r:
                res.seconds[arm].append(time.perf_counter() - t0)
        if tokens["cell"] != tokens["raw"][: len(tokens["cell"])]:
            raise RuntimeError(f"cell and raw decoded different tokens in round {r}: "
                               f"{tokens['cell'][:8]} vs {tokens['raw'][:8]}")


def run(model: str, *, prompt_tokens: int = 256, decode_tokens: int = 64, rounds: int = 9) -> BenchResult:
    import llama_cpp
    from llama_cpp import Llama

    m = models.resolve(model)
    threads = cpu.usable_count()
    # the raw arm decodes the prompt as one batch: llama.cpp aborts the process on a batch over n_batch
    # (GGML_ASSERT(n_tokens_all <= cparams.n_batch): --prompt-tokens 1000 was SIGABRT), so every arm takes it whole
    n_ctx, n_batch = max(1024, prompt_tokens + decode_tokens + 16), max(512, prompt_tokens)
    ceiling = models.context_ceiling(m)
    if ceiling is not None and prompt_tokens + decode_tokens + 16 > ceiling:  # llama.cpp aborts the process past it
        raise WorkbenchError(f"--prompt-tokens {prompt_tokens} + --decode-tokens {decode_tokens} (+16) exceed the "
                             f"context of model {model} ({ceiling} tokens, from its own metadata); nothing was run")
    extra = decide_extra_buffers()
    arms = ["cell", "raw", "llama", "cell_xb_off"] if extra.use else ["cell", "raw"]
    res = BenchResult(m.name, prompt_tokens, decode_tokens, rounds, threads, {a: [] for a in arms},
                      environment.hardware()["summary"], llama_cpp.__version__, extra.use, extra.reason,
                      sorted(f for f in cpu.flags() if f in cpu.SHOWN_FLAGS))
    opts = dict(kv_budget_tokens=n_ctx, n_batch=n_batch, threads=threads)
    served = _Arms(open_cell("llamacpp", model, **opts, extra_buffers=extra.use), None)
    try:
        served.raw = _Raw(llama_cpp, str(m.path), n_ctx, n_batch, threads, extra)
        if extra.use:
            served.llama = Llama(str(m.path), n_ctx=n_ctx, n_batch=n_batch, n_threads=threads,
                                 n_threads_batch=threads, verbose=False)
            served.cell_xb_off = open_cell("llamacpp", model, **opts, extra_buffers=False)
        _rounds(res, served, arms, min(served.cell.describe().extra["vocab_size"], 30000))
    finally:
        served.close()
    return res


def render(res: BenchResult) -> str:
    lines = [f"benchmark: {res.model}, {res.prompt_tokens} prefill + {res.decode_tokens} decode tokens, "
             f"{res.rounds} alternating rounds, {res.threads} threads, llama-cpp-python {res.llama_cpp_version}",
             f"hardware: {res.hardware} ({platform.machine()}; flags: {' '.join(res.cpu_flags) or 'none shown'})",
             f"extra buffers (every arm but cell_xb_off): {res.extra_buffers_reason}"]
    for arm, label in _LABELS.items():
        if arm in res.seconds:
            xs = res.seconds[arm]
            lines.append(f"  {label:<30} median {metrics.render('round_s', statistics.median(xs)):>10}   "
                         f"min {metrics.render('round_s', min(xs)):>10}  max {metrics.render('round_s', max(xs)):>10}")
    for arm, base in res.ratios():
        lines.append(f"  {arm} / {base:<12} median ratio {metrics.render('time_ratio', res.ratio(arm, base))}")
    return "\n".join(lines)


_LABELS = {"cell": "workbench cell", "raw": "raw low-level API", "llama": "high-level Llama",
           "cell_xb_off": "cell, extra buffers off"}
