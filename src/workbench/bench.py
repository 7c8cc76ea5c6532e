"""Benchmark: the llama.cpp cell against direct llama-cpp-python on identical work.

Each round is a cold prefill of ``prompt_tokens`` followed by ``decode_tokens`` greedy tokens.
Arms alternate within every round (cell, raw low-level API, high-level ``Llama``), all with the
same model, context size, batch size and thread count (all cores), so machine noise hits them
alike; the figure is the median of per-round ratios. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import ctypes
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field

from . import environment, models
from .cells import open_cell
from .probes.common import TOKEN_LO


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

    def median(self, arm: str) -> float:
        return statistics.median(self.seconds[arm])

    def ratio(self, arm: str, base: str) -> float:
        """Median over rounds of arm/base (paired within a round)."""
        return statistics.median(a / b for a, b in zip(self.seconds[arm], self.seconds[base]))

    def to_dict(self) -> dict:
        return asdict(self) | {"cell_over_raw": self.ratio("cell", "raw"),
                               "cell_over_llama": self.ratio("cell", "llama")}


class _Raw:
    """The most direct use of llama-cpp-python: low-level context, one batch, greedy sampler."""

    def __init__(self, ll, path: str, n_ctx: int, n_batch: int, threads: int) -> None:
        self.ll = ll
        mp = ll.llama_model_default_params()
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


def run(model: str, *, prompt_tokens: int = 256, decode_tokens: int = 64, rounds: int = 9) -> BenchResult:
    import llama_cpp
    from llama_cpp import Llama

    m = models.resolve(model)
    threads = os.cpu_count() or 1
    n_ctx, n_batch = max(1024, prompt_tokens + decode_tokens + 16), 512
    res = BenchResult(m.name, prompt_tokens, decode_tokens, rounds, threads,
                      {"cell": [], "raw": [], "llama": []}, environment.hardware()["summary"], llama_cpp.__version__)
    cell = open_cell("llamacpp", model, kv_budget_tokens=n_ctx, n_batch=n_batch, n_threads=threads)
    raw = _Raw(llama_cpp, str(m.path), n_ctx, n_batch, threads)
    hl = Llama(str(m.path), n_ctx=n_ctx, n_batch=n_batch, n_threads=threads, n_threads_batch=threads, verbose=False)
    try:
        hi = min(cell.describe().extra["vocab_size"], 30000)
        for r in range(rounds + 1):  # round 0 warms every arm up and is discarded
            prompt = [TOKEN_LO + (r * 7919 + i * 104729) % (hi - TOKEN_LO) for i in range(prompt_tokens)]
            t0 = time.perf_counter()
            cell.ensure_prefix(prompt, salt=f"bench-{r}")
            a = cell.decode(max_tokens=decode_tokens).tokens
            t1 = time.perf_counter()
            b = raw.work(prompt, decode_tokens)
            t2 = time.perf_counter()
            hl.reset()
            c = []
            for tok in hl.generate(prompt, temp=0.0, top_k=1, reset=True):
                c.append(tok)
                if len(c) == decode_tokens:
                    break
            t3 = time.perf_counter()
            if a != b[: len(a)]:
                raise RuntimeError(f"cell and raw decoded different tokens in round {r}: {a[:8]} vs {b[:8]}")
            if r:
                res.seconds["cell"].append(t1 - t0)
                res.seconds["raw"].append(t2 - t1)
                res.seconds["llama"].append(t3 - t2)
    finally:
        cell.close()
        raw.close()
        hl.close()
    return res


def render(res: BenchResult) -> str:
    lines = [f"benchmark: {res.model}, {res.prompt_tokens} prefill + {res.decode_tokens} decode tokens, "
             f"{res.rounds} alternating rounds, {res.threads} threads, llama-cpp-python {res.llama_cpp_version}",
             f"hardware: {res.hardware} ({platform.machine()})"]
    for arm, label in (("cell", "workbench cell"), ("raw", "raw low-level API"), ("llama", "high-level Llama")):
        xs = res.seconds[arm]
        lines.append(f"  {label:<20} median {statistics.median(xs) * 1e3:8.1f} ms   "
                     f"min {min(xs) * 1e3:8.1f}  max {max(xs) * 1e3:8.1f}")
    lines.append(f"  cell / raw    median ratio {res.ratio('cell', 'raw'):.3f}")
    lines.append(f"  cell / Llama  median ratio {res.ratio('cell', 'llama'):.3f}")
    return "\n".join(lines)
