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
             "decode_per_token_s": 0.004, "kv": "f16" if role == B else None} for i in range(runs)]


def serve(arm, role, tier, capacity, engine):
    return {"kind": "serve", "arm": arm, "role": role, "engine": engine, "tier": tier, "served": True,
            "engine_capacity_tokens": capacity, "refused_by": None, "kv": "f16" if role == B else None}


def gates_finding(engine="trtllm", *, cand32=1.0, base32=4.0, g1=(32768, 16384), gpu=True, quantization="F32",
                  created=None) -> findings.Finding:
    """A gates finding on ``engine``: the first-output time at 32k of the candidate and the baseline (G3 is their
    ratio; G2 reads them against its 2 s budget), G1's tiers (candidate, baseline)."""
    plan = long_context.Plan(engine, "synthetic:long", tiers=(16384, 32768), runs=3)
    rows = [serve(engine, C, g1[0], g1[0] + 100, engine), serve("llamacpp:f16", B, g1[1], g1[1], "llamacpp"),
            *timed(engine, C, 32768, 3, cand32, engine), *timed("llamacpp:f16", B, 32768, 3, base32, "llamacpp"),
            *timed(engine, C, 16384, 3, 0.3, engine), *timed("llamacpp:f16", B, 16384, 3, 0.3, "llamacpp")]
    ident = {"model": "synthetic-long", "digest": "a" * 64, "quantization": "F32", "prompt_set": "p",
             "output_cap": 128, "device": "d", "runtime_profile": "threads=1", "warm_state": "cold"}
    m = long_context.Measured(rows, (16384, 32768), 8 << 20,
                              {engine: ident | {"quantization": quantization}, "llamacpp:f16": ident}, {}, [], None,
                              SYNTH)
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
