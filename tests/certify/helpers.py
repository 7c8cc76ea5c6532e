"""Findings as the gates, the loop's gate and the quality smoke write them, built from rows (no engine runs)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from workbench import findings, models
from workbench.certify import gates, long_context
from workbench.loop import equal, gate

GPU = {"available": True, "devices": [{"name": "NVIDIA H200"}]}
C, B = gates.CANDIDATE, gates.BASELINE
SYNTH = models.ResolvedModel("synthetic:long", "synthetic-long", "synthetic", Path("/nonexistent.gguf"), "a" * 64)


def timed(arm, role, tier, runs, first, engine):
    return [{"kind": "timed", "arm": arm, "role": role, "engine": engine, "tier": tier, "run": i, "served": True,
             "first_output_s": first, "prefill_s": first, "turn_s": first + 0.5, "decode_s": 0.5,
             "decode_per_token_s": 0.004, "kv": "f16", "output_cap": 128, "decode_tokens": 128} for i in range(runs)]


def serve(arm, role, tier, capacity, engine):
    """A serve row: the candidate's pool sized by its engine from the budget; llama.cpp's next tier's KV buffer as
    its engine states it, over the budget; each cell's own A2 passed."""
    row = {"kind": "serve", "arm": arm, "role": role, "engine": engine, "tier": tier, "served": True,
           "budget_bytes": 8 << 20, "engine_capacity_tokens": capacity, "refused_by": None, "kv": "f16",
           "quality": "passed", "device": "GPU: NVIDIA H200", "gpu_layers": "all"}
    if role == C:
        return row | {"capacity_from": "engine"}
    return row | {"capacity_from": "computed", "next_tier": tier * 2, "next_tier_kv_bytes": 16 << 20}


def a2(arm, role, engine, tokens=(5, 6, 7, 8)):
    return {"kind": "a2", "arm": arm, "role": role, "engine": engine, "status": "passed", "equal": True,
            "cold_tokens": list(tokens), "warm_tokens": list(tokens), "prompt_sha256": "p" * 64}


IDENTITY = {"model": "synthetic-long", "digest": "a" * 64, "quantization": "F32",
            "architecture": "layers=1 heads=1 kv_heads=1 head_dim=64 hidden=64 vocab=512", "kv_precision": "f16",
            "prompt_set": "p", "output_cap": 128, "device": "GPU: NVIDIA H200",
            "runtime_profile": "threads=default; batch=the engine's default; gpu_layers=all", "warm_state": "cold"}
TARGET = {"gpu": ["NVIDIA H200"], "driver": "x", "gpu_source": "nvml", "certified_file": "certified.txt",
          "certified_sha256": "c" * 64, "models": {"synthetic:long": "synthetic:long"}}


def gates_finding(engine="trtllm", *, cand32=1.0, base32=4.0, g1=(32768, 16384), gpu=True, quantization="F32",
                  created=None, identity=None, on_target=None) -> findings.Finding:
    """A gates finding on ``engine`` as a run on target writes it: the first-output time at 32k of the candidate
    and the baseline (G3 is their ratio; G2 reads them against its 2 s budget), G1's tiers (candidate, baseline);
    ``identity``: fields of the baseline arm's identity that differ from the candidate's; ``on_target``: the run's
    (by default on target where it ran on a GPU, with its verified target)."""
    on_target = gpu if on_target is None else on_target
    plan = long_context.Plan(engine, "synthetic:long", runs=3, on_target=on_target,
                             certified="certified.txt" if on_target else None)
    base = "llamacpp:f16"
    rows = [serve(engine, C, g1[0], g1[0] + 100, engine), serve(base, B, g1[1], g1[1], "llamacpp"),
            a2(engine, C, engine), a2(base, B, "llamacpp"),
            *timed(engine, C, 32768, 3, cand32, engine), *timed(base, B, 32768, 3, base32, "llamacpp"),
            *timed(engine, C, 16384, 3, 0.3, engine), *timed(base, B, 16384, 3, 0.3, "llamacpp")]
    ident = dict(IDENTITY)
    m = long_context.Measured(rows, (16384, 32768), 8 << 20,
                              {engine: ident | {"quantization": quantization}, base: ident | (identity or {})}, {},
                              [], None, SYNTH, TARGET if on_target and gpu else None)
    f = long_context.finding(plan, m)
    f.environment["engine_version"] = "1.2.1"  # the candidate's cell said so (none is described here)
    if gpu:
        f.environment["hardware"] = {"summary": "H200", "gpu": GPU}
    if created:
        f.created = created
    return f


def loop_gate(verdict="refuted", low=1.1, high=1.4, engine="trtllm") -> findings.Finding:
    """A loop.gate finding on the GPU, recorded as gate_finding writes it, re-derivable to ``verdict``."""
    ev = gate.GateEvidence(None, best_reference="llamacpp-server-spec", compared_turns=40)
    f = findings.Finding(
        probe="loop.gate", probe_version="4", claims=[gate.CLAIM], verdict=verdict, summary=f"loop gate {verdict}",
        engine=engine, environment={"engine": engine, "engine_version": "1.2.1", "model": {"name": "m"},
                                    "hardware": {"summary": "H200", "gpu": GPU}, "workbench_version": "0", "time": "t",
                                    "target": {"gpu": ["NVIDIA H200"]}},
        params={"model": "m", "arm": "trtllm", "rule": gate.GateRule().as_dict(), "equal_work": equal.EqualWork().as_dict()},
        metrics={"speedup_vs_best_llamacpp": {"value": (low + high) / 2, "unit": "x", "source": "derived"},
                 "speedup_ci_low": {"value": low, "unit": "x", "source": "derived"},
                 "speedup_ci_high": {"value": high, "unit": "x", "source": "derived"}},
        evidence={"gate": {k: v for k, v in asdict(ev).items() if k not in ("speedup", "on_target")},
                  "rows": [{"arm": "trtllm", "best_llamacpp": False},
                           {"arm": "llamacpp-server-spec", "best_llamacpp": True}]},
        result_class="raw_backend_control")
    from workbench.loop.results import Loop

    f.probe_version = Loop.version
    return f
