"""Whether a stored finding settles a claim: its verdict re-derived at load, never believed from its string.

A finding is a file anyone can write. Whatever reads findings (standing, so the report, the blueprint and the
gateway guide's write-back) asks :func:`unsettled` first: the reasons its verdict on a claim settles nothing.
Each rule is a row of :data:`RULES`, checked in order; every one reads only the finding itself and this
workbench's declarations (the probe's rule, its version and parameters; the claim's kind):

- a finding dated in the future (beyond clock skew) is refused;
- a finding of a probe this workbench does not declare, or of another version of it, cannot be re-checked by
  the rule that wrote it: re-run it (a newer version supersedes an older one); nor can one on a claim its probe
  does not test, or one whose engine is not the engine its own fingerprint was taken on;
- a finding made on a test double (its fingerprint names one: ``test_double``) exercises the workbench, never the
  engine, so it settles nothing, however it came out;
- a static survey (symbols exist) never settles a behavioural claim;
- a parameter that builds the outcome (``Probe.outcome_params`` moved from its default) makes the run exploratory;
- an on-target claim needs the target's GPU in the finding's own fingerprint;
- an answer (and ``not-applicable`` on the claim's subject) must be re-derived by the family's rule from what the
  finding recorded (:meth:`workbench.probes.Declared.rederive`: the supports it rests on hold on its own
  engine-read metrics; the loop's gate decided again from its recorded evidence).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Callable

from . import claims as _claims
from . import probes
from .findings import Finding, has_gpu
from .versions import natural

SKEW = _dt.timedelta(minutes=10)  # clock skew between machines that share a findings folder


@dataclass(frozen=True)
class Check:
    """One row of the rule: ``why`` returns the reason the finding settles nothing on the claim, or None."""

    name: str
    why: Callable[[Finding, _claims.Claim, "probes.Declared | None", _dt.datetime], str | None]


def created_at(created: str) -> _dt.datetime | None:
    """A finding's creation time (a naive stamp is UTC), or None where it is not an ISO time."""
    try:
        t = _dt.datetime.fromisoformat(created)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=_dt.timezone.utc)


def _future(f: Finding, c: _claims.Claim, d: "probes.Declared | None", now: _dt.datetime) -> str | None:
    t = created_at(f.created)
    if t is None:
        return f"its date {f.created!r} is not an ISO time"
    return f"it is dated {f.created}, in the future" if t > now + SKEW else None


def _declared(f: Finding, c: _claims.Claim, d: "probes.Declared | None", now: _dt.datetime) -> str | None:
    if d is None:
        return f"no probe {f.probe!r} is declared here, so its rule cannot be re-checked"
    if c.id not in d.claims:
        return f"{f.probe} does not test {c.id} (it declares {', '.join(d.claims)})"
    said = (f.environment or {}).get("engine")
    if said != f.engine:
        return f"it names engine {f.engine!r}, but its own fingerprint was taken on {said!r}"
    if f.probe_version == d.version:
        return None
    newer = natural(f.probe_version) > natural(d.version)
    return (f"{f.probe} version {f.probe_version} is {'newer' if newer else 'older'} than this workbench's "
            f"{d.version}: its verdict was reached by {'a rule this workbench does not know' if newer else 'a rule since superseded'}; "
            "re-run it")


def _double(f: Finding, c: _claims.Claim, d: "probes.Declared | None", now: _dt.datetime) -> str | None:
    said = (f.environment or {}).get("test_double")
    return (f"it was made on a test double ({said}), which stands for {f.engine} in the workbench's own tests and "
            "never answers for it" if said else None)


def _survey(f: Finding, c: _claims.Claim, d: "probes.Declared | None", now: _dt.datetime) -> str | None:
    static = isinstance(d, probes.Probe) and not d.needs_engine
    return (f"{f.probe} surveys the installed package (symbols exist), and existence never settles a behavioural "
            "claim" if static and not c.survey else None)


def _exploratory(f: Finding, c: _claims.Claim, d: "probes.Declared | None", now: _dt.datetime) -> str | None:
    moved = [f"{k}={f.params.get(k, '(not recorded)')!r}" for k, default in (d.outcome_defaults() if d else {}).items()
             if k not in f.params or f.params[k] != default]  # a parameter left out is no evidence of the default
    if moved:
        return (f"exploratory: {', '.join(moved)} builds the outcome instead of measuring it (the claim's run keeps "
                "the default)")
    if (f.cell_options or {}).get(CONNECTOR_OPTION):
        return (f"exploratory: the cell ran with a KV connector ({CONNECTOR_OPTION}), which loads KV from outside the "
                "engine's own cache: its cached-token counts are not the engine's prefix cache")
    manager = (f.cell_options or {}).get(KV_MANAGER_OPTION, PINNED_MANAGER)
    if manager != PINNED_MANAGER:
        return (f"exploratory: the cell ran the release's default KV manager ({KV_MANAGER_OPTION}={manager!r}), not the "
                "one the blueprint maps its mechanisms onto (retention, the event block key, the connector): a "
                "finding beside the claim's run, never its answer")
    return None


#: A cell option that puts a KV connector in the engine: what it loads counts as cached tokens (vLLM counts
#: external hits in ``num_cached_tokens``), so a probe of the engine's own cache measures the connector instead.
CONNECTOR_OPTION = "kv_transfer_config"
#: A cell option that picks the engine's KV manager (TensorRT-LLM 1.4: V2 by default, which ignores per-request
#: retention); the claims are about the manager the cell pins unless told otherwise.
KV_MANAGER_OPTION, PINNED_MANAGER = "kv_manager", "v1"


def _on_target(f: Finding, c: _claims.Claim, d: "probes.Declared | None", now: _dt.datetime) -> str | None:
    return None if not c.on_target or has_gpu(f) else "an on-target claim, but the finding's hardware records no GPU"


def _rederived(f: Finding, c: _claims.Claim, d: "probes.Declared | None", now: _dt.datetime) -> str | None:
    try:
        why = d.rederive(f, c) if d is not None else []
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:  # a file shaped unlike the family's own
        return f"what it recorded cannot be read by {f.probe}'s rule ({type(e).__name__}: {e})"
    return "; ".join(why) or None


RULES: tuple[Check, ...] = (
    Check("dated", _future),
    Check("declared", _declared),
    Check("double", _double),
    Check("survey", _survey),
    Check("exploratory", _exploratory),
    Check("on target", _on_target),
    Check("re-derived", _rederived),
)
ANSWERS = ("confirmed", "refuted", "partial", "not-applicable")  # verdicts that settle a claim
ALWAYS = ("dated", "declared")  # rows that apply to every verdict: a not-run from the future or an old rule too


def unsettled(f: Finding, claim_id: str, now: _dt.datetime | None = None) -> tuple[str, ...]:
    """Why ``f``'s verdict on ``claim_id`` settles nothing (empty: it may settle the claim)."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    claim = _claims.get(claim_id)
    d = probes.declared(f.probe)
    answers = f.verdict_on(claim_id) in ANSWERS
    out = []
    for check in RULES:
        if not answers and check.name not in ALWAYS:
            continue
        why = check.why(f, claim, d, now)
        if why:
            out.append(why)
    return tuple(out)


def unsettled_answer(f: Finding) -> tuple[str, ...]:
    """Why the first claim on which ``f`` answers settles nothing (empty where each of its answers may settle)."""
    return next((why for c in f.claims if f.verdict_on(c) in ANSWERS and (why := unsettled(f, c))), ())


def shown_verdict(f: Finding) -> str:
    """The finding's verdict as a log prints it: marked where, on one of its claims, it settles nothing."""
    return f.verdict + (" (settles nothing)" if unsettled_answer(f) else "")


__all__ = ["ANSWERS", "ALWAYS", "Check", "RULES", "SKEW", "created_at", "shown_verdict", "unsettled", "unsettled_answer"]
