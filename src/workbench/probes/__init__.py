"""Probes: small experiments that each test one blueprint claim and return a finding.

Probes are registered by name and imported lazily. ``run(name, engine=…, model=…, params=…)``
validates the typed parameters, runs the experiment on fresh cells, and returns a
:class:`~workbench.findings.Finding` — ``not-run`` with the reason when the engine or machine
cannot run it, never a guessed answer.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import tempfile
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

from .. import cells, claims, environment, findings, isolate, metrics, models, progress
from ..certify import classes
from ..engine import Cell, Description, EngineUnavailable, UnsupportedFeature, Verdict, WorkbenchError
from ..metrics import Support
from ..params import parse_bool
from ..registry import Registry, UnknownName

class ParamError(WorkbenchError, ValueError):
    """A probe parameter that is unknown or of the wrong type; the message lists the valid ones."""


class NotRunnable(WorkbenchError):
    """Raised inside a probe when this engine/machine cannot answer; becomes a ``not-run`` finding."""


@dataclass
class Outcome:
    """What a probe concluded. The framework turns it into a Finding."""

    verdict: str
    summary: str
    metrics: dict[str, Any] = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    claim_verdicts: dict[str, str] = field(default_factory=dict)
    rests_on: tuple[Support, ...] = ()  # the value of each metric the verdict rests on: engine-read, finite, holding
    claim_rests_on: dict[str, tuple[Support, ...]] = field(default_factory=dict)  # a claim row with its own evidence
    sources: dict[str, str] = field(default_factory=dict)  # a metric's source in this run, where not the declared one
    claim_reasons: dict[str, str] = field(default_factory=dict)  # a claim row's own reason, in its rule's words

    def __post_init__(self) -> None:  # a misspelt verdict fails where the rule returns it, not at the schema
        self.verdict = Verdict.check(self.verdict, "a probe's verdict")
        self.claim_verdicts = {c: Verdict.check(v, f"the verdict on {c}") for c, v in self.claim_verdicts.items()}


@dataclass(frozen=True)
class Decision:
    """What a rule's decision ladder returns (summarise → decide → explain): the verdict, the rung that gave it
    (the key the rule's wording reads), the claim rows it settles beside, and the metric values it rests on."""

    verdict: str
    case: str
    claim_verdicts: Mapping[str, str] = field(default_factory=dict)
    rests_on: tuple[Support, ...] = ()


@dataclass(frozen=True)
class Figure:
    """A figure of a finding's evidence: ``kind`` names a builder in :mod:`workbench.plots`. ``rows`` says what
    the builder draws: ``evidence`` (each finding's evidence rows) or ``metrics`` (one row per finding: its
    parameters and metric values, e.g. one loop arm's speed-up with its interval)."""

    name: str
    kind: str
    options: Mapping[str, Any] = field(default_factory=dict)
    rows: Literal["evidence", "metrics"] = "evidence"


class Declared:
    """What every writer of findings declares, so the report, the notebooks and standing read one shape: the
    claims (ids in :mod:`workbench.claims`, the only home of claim text; the first is the one it is about), the
    version its findings carry and the figures drawn of them. A probe is one (:class:`Probe`); the agentic loop
    is another (:data:`SOURCES`). ``name`` is the one it is registered under, given by :func:`declared`."""

    name: str = ""
    version: str = "1"  # bump when the experiment or its verdict rule changes
    claims: tuple[str, ...] = ()
    figures: tuple[Figure, ...] = ()  # what the notebooks and the report draw of its evidence
    rests: metrics.Rests = {}  # what each verdict of its rule rests on (checked when a finding is written and read)
    # benchmark integrity's class of what it measures (workbench.certify.classes): a probe isolates one mechanism
    # (microbenchmark); a writer that drives an engine end to end as a backend declares raw_backend_control
    result_class: str = classes.ResultClass.MICRO.value

    @property
    def claim(self) -> claims.Claim:
        return claims.get(self.claims[0])

    def obtained(self, found: Sequence[findings.Finding]) -> str:
        """How ``found`` (its findings) were obtained, in the words a figure's subtitle gives."""
        return f"workbench probe {self.name}"

    def outcome_defaults(self) -> dict[str, Any]:
        """The parameters that build the outcome instead of measuring it, each with the value the claim's run keeps
        (:mod:`workbench.settle`: a finding with one moved is exploratory)."""
        return {}

    def rederive(self, f: findings.Finding, claim: claims.Claim) -> list[str]:
        """Why ``f``'s verdict on ``claim`` is not re-derived from what it recorded by this family's rule (empty: it
        is). A probe's rule: the supports it recorded hold on its own metrics, engine-read and finite, as the guard
        (:func:`at_most_inconclusive_without_engine`) required when it was written; on the claim's subject,
        not-applicable too."""
        verdict = f.verdict_on(claim.id)
        try:
            supports = f.supports_of(claim.id)
        except (KeyError, ValueError) as e:
            return [f"a recorded support is not one this workbench declares ({e})"]
        subject = is_subject(f.engine, [claim.id])
        if not must_rest(verdict, supports, subject):
            return []
        values = {t: m.get("value") for t, m in f.metrics.items()}
        why = unfit(verdict, values, supports, {t: m.get("source") for t, m in f.metrics.items()}, subject)
        return why or [w for w in [metrics.undeclared(self.rests, claim.id, verdict, supports)] if w]


class Probe(Declared):
    """Base class. Subclasses set ``version``, ``claims``, ``figures`` (:class:`Declared`) and ``Params``. Its
    ``name`` is the one it is registered under in :data:`PROBES` (its only home), given by :func:`get`."""

    needs_engine: bool = True  # False: a static probe that reads the installed package, never runs a model
    outcome_params: tuple[str, ...] = ()  # parameters that, moved from their default, build the outcome

    def outcome_defaults(self) -> dict[str, Any]:
        defaults = {f.name: f.default for f in dataclasses.fields(self.Params)}
        return {k: defaults[k] for k in self.outcome_params}

    @dataclass(frozen=True)
    class Params:
        pass

    def run(self, ctx: "ProbeContext", p: Any) -> Outcome:  # pragma: no cover - abstract
        raise NotImplementedError

    def longest(self, p: Any) -> tuple[int, str] | None:
        """The longest sequence ``p`` asks for where parameters multiply (k blocks of B tokens), and how, for
        :func:`check_context`; None where each bounded parameter alone is a sequence's length."""
        return None


class ProbeContext:
    """What a probe gets: a way to open fresh cells (one per arm) and the run's identity. As a context manager it
    removes the folders :meth:`scratch` made."""

    def __init__(self, engine: str, model: str, cell_options: Mapping[str, Any] | None = None) -> None:
        self.engine, self.model = engine, model
        self.cell_options = dict(cell_options or {})
        self.description: Description | None = None
        self.resolved: models.ResolvedModel | None = None
        self._scratch: list[str] = []

    def __enter__(self) -> "ProbeContext":
        return self

    def __exit__(self, *exc: object) -> None:
        while self._scratch:
            shutil.rmtree(self._scratch.pop(), ignore_errors=True)

    def scratch(self, prefix: str) -> str:
        """A short folder of this probe run's own, in the temp folder (an ``ipc://`` socket's path must be short),
        gone when the run ends."""
        folder = tempfile.mkdtemp(prefix=prefix)
        self._scratch.append(folder)
        return folder

    def fixed_threads(self, threads: int) -> dict:
        """Cell options that fix the thread count for timed work (``CellOptions.threads``, which every engine's
        options have), unless the run set it already."""
        return {} if "threads" in self.cell_options else {"threads": threads}

    def open(self, model: str | None = None, **options: Any) -> Cell:
        """A fresh cell (``options`` override the run's cell options). Records the first description."""
        try:
            cell = cells.open_cell(self.engine, model or self.model, **(self.cell_options | options))
        except TypeError as e:  # an option the engine's open() does not take
            raise ParamError(f"engine {self.engine} rejected a cell option: {e}") from None
        if self.description is None and (model is None or model == self.model):
            self.description = cell.describe()
            self.resolved = getattr(cell, "model", None)
        return cell


PROBES: Registry = Registry("probe", base=Probe)
for _name, _target in {
    "retention.pinning_under_pressure": "workbench.probes.retention:PinningUnderPressure",
    "reuse.per_request_metrics": "workbench.probes.reuse:PerRequestMetrics",
    "connector.export_granularity": "workbench.probes.connector:ExportGranularity",
    "prefix.warmup_materialization": "workbench.probes.warmup:WarmupMaterialization",
    "isolation.cache_salt": "workbench.probes.isolation:CacheSalt",
    "capacity.budget_policy": "workbench.probes.capacity:BudgetPolicy",
    "surface.cpp_entrypoint": "workbench.probes.cpp_entrypoint:CppEntrypoint",
    "surface.contract_mapping": "workbench.probes.contract_mapping:ContractMapping",
    "events.inventory_fidelity": "workbench.probes.events_fidelity:InventoryFidelity",
    "events.hash_parity": "workbench.probes.events_parity:HashParity",
    "events.one_consumer": "workbench.probes.events_ownership:OneConsumer",
    "events.overflow_resync": "workbench.probes.events_overflow:OverflowResync",
    "events.inventory_isolation": "workbench.probes.events_isolation:InventoryIsolation",
    "events.admission": "workbench.probes.events_admission:Admission",
    "events.ledger_closure": "workbench.probes.events_ledger:LedgerClosure",
    "gateway.pd": "workbench.probes.gateway_pd:PdShape",
    "gateway.routing": "workbench.probes.gateway_routing:GatewayRouting",
    "contract.conformance": "workbench.probes.conformance:Conformance",
    "contract.benchreport": "workbench.probes.benchreport:BenchReport",
}.items():
    PROBES.register(_name, _target)


SOURCES: Registry = Registry("finding source", base=Declared)
"""Writers of findings other than the probes, by the name their findings start with (``loop.<arm>``, ``loop.gate``,
``evaltable.prefix_caching``, ``gates.long_context``, ``quality.smoke``)."""
SOURCES.register("loop", "workbench.loop.results:Loop")
SOURCES.register("evaltable", "workbench.evaltable.finding:PrefixCaching")
SOURCES.register("gates", "workbench.certify.long_context:Gates")
SOURCES.register("quality", "workbench.certify.quality:QualitySmoke")


def names() -> list[str]:
    return PROBES.names()


def family(probe: str) -> str | None:
    """The declared name behind findings named ``probe``: the probe's own, or its source's (``loop`` for
    ``loop.llamacpp``); None for a name nothing here declares (a finding from a newer workbench)."""
    if probe in PROBES:
        return probe
    head = probe.split(".", 1)[0]
    return head if head in SOURCES else None


def declared(probe: str) -> Declared | None:
    """The declaration (claims, version, figures) behind findings named ``probe``, or None (:func:`family`)."""
    name = family(probe)
    if name is None:
        return None
    if name in PROBES:
        return get(name)
    source = SOURCES.get(name)()
    source.name = name
    return source


def get(name: str) -> Probe:
    try:
        probe = PROBES.get(name)()
    except UnknownName as e:
        raise ParamError(str(e)) from None
    probe.name = name
    return probe


def describe_params(name: str) -> list[dict]:
    """Each parameter of probe ``name``: name, type, default, help."""
    probe = get(name)
    hints = typing.get_type_hints(probe.Params)
    return [{"name": f.name, "type": _type_name(hints[f.name]),
             "default": f.default_factory() if f.default is dataclasses.MISSING else f.default,
             "help": f.metadata.get("help", ""), "bound": str(f.metadata.get("bound") or "")}
            for f in dataclasses.fields(probe.Params)]


def _type_name(t: Any) -> str:
    return getattr(t, "__name__", None) or str(t).replace("typing.", "")


def parse_params(probe: Probe, raw: Mapping[str, Any]) -> Any:
    """Build ``probe.Params`` from strings or values, converting to each field's declared type."""
    fields = {f.name: f for f in dataclasses.fields(probe.Params)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ParamError(f"probe {probe.name}: unknown parameter(s) {', '.join(unknown)}; "
                         f"valid: {', '.join(fields) or '(none)'}")
    hints = typing.get_type_hints(probe.Params)
    values = {k: _convert(probe.name, k, hints[k], v) for k, v in raw.items()}
    check_bounds(probe, values)
    try:
        return probe.Params(**values)
    except (TypeError, ValueError) as e:
        raise ParamError(f"probe {probe.name}: {e}") from None


def _is_none(t: Any, v: Any) -> bool:
    """``v`` spells None and ``t`` is an optional type that allows it."""
    spelled = v is None or (isinstance(v, str) and v.lower() in {"none", "null", ""})
    return spelled and type(None) in typing.get_args(t)


def _scalar(t: Any, v: Any) -> Any:
    """``v`` as the scalar type ``t`` (ValueError where it is not one); other types pass ``v`` through."""
    if t is bool:
        return parse_bool(v) if isinstance(v, str) else bool(v)
    if t not in (int, float, str):
        return v
    if t is int and isinstance(v, float) and not v.is_integer():
        raise ValueError(v)
    out = t(v)
    if t is float and not math.isfinite(out):
        raise ValueError(v)
    return out


def _convert(probe: str, key: str, t: Any, v: Any) -> Any:
    origin = typing.get_origin(t)
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        if _is_none(t, v):
            return None
        t = next(a for a in typing.get_args(t) if a is not type(None))
    try:
        if typing.get_origin(t) is tuple:
            items = v.split(",") if isinstance(v, str) else list(v)
            return tuple(_convert(probe, key, typing.get_args(t)[0], x.strip() if isinstance(x, str) else x)
                         for x in items if not (isinstance(x, str) and not x.strip()))
        return _scalar(t, v)
    except ParamError:
        raise  # an element of a tuple, already named
    except (ValueError, TypeError):
        finite = " (finite)" if t is float else ""
        raise ParamError(f"probe {probe}: parameter {key} must be {_type_name(t)}{finite}, got {v!r}") from None


def preload(engine: str) -> tuple[str, ...]:
    """What an isolated probe's child on ``engine`` imports anyway: this module and the engine's cell
    (:func:`workbench.cells.preload`); ``workbench run`` shares one forkserver per engine on it."""
    return (__name__, *cells.preload(engine))


def run(name: str, *, engine: str, model: str = models.DEFAULT_MODEL, params: Mapping[str, Any] | None = None,
        out: str | Path | None = None, cell_options: Mapping[str, Any] | None = None,
        isolated: bool = True) -> findings.Finding:
    """Run probe ``name`` on ``engine``/``model``; write the finding to ``out`` when given.

    ``isolated`` runs the experiment in a child process (:mod:`workbench.isolate`): an engine crash
    raises :class:`~workbench.isolate.EngineCrashed` with its signal and log tail, writes no finding,
    and leaves the caller (a CLI, a notebook's kernel) alive.
    """
    if isolated:  # what is refused up front is refused here, before a child (and its engine's imports) starts
        _check(get(name), engine, model, params, cell_options)
        progress.say(f"probe {name} on {engine}")
        finding = isolate.call(run, name, engine=engine, model=model, params=params, cell_options=cell_options,
                               isolated=False, preload=preload(engine))
        if out is not None:
            findings.write(finding, out)
        return finding
    probe = get(name)
    p = _check(probe, engine, model, params, cell_options)
    ctx = ProbeContext(engine, model, cell_options)
    reason = None
    if probe.needs_engine:
        avail = cells.availability(engine)
        reason = None if avail.available else avail.reason
    if reason is None:
        try:
            with ctx:
                outcome = probe.run(ctx, p)
        except (EngineUnavailable, NotRunnable, UnsupportedFeature) as e:
            reason = getattr(e, "reason", None) or str(e)
    if reason is not None:
        outcome = Outcome("not-run", f"Not run on {engine}: {reason}", notes=[reason])
    subject = is_subject(engine, (*probe.claims, *outcome.claim_verdicts))
    outcome = at_most_inconclusive_without_engine(outcome, subject)
    check_rests(probe, outcome, subject)
    finding = _finding(probe, ctx, p, outcome, reason)
    if out is not None:
        findings.write(finding, out)
    return finding


def _check(probe: Probe, engine: str, model: str, params: Mapping[str, Any] | None,
           cell_options: Mapping[str, Any] | None) -> Any:
    """The engine, the parameters (parsed: returned) and :func:`_refuse_early`'s refusals."""
    try:
        cells.ENGINES.check(engine)
    except UnknownName as e:
        raise ParamError(str(e)) from None
    p = parse_params(probe, params or {})
    _refuse_early(probe, p, set(params or {}), engine, model, cell_options)
    return p


def _refuse_early(probe: Probe, p: Any, given: set[str], engine: str, model: str,
                  cell_options: Mapping[str, Any] | None) -> None:
    """What is refused before anything runs: a model spec that names no model (an engine that is not installed
    would otherwise record it in a not-run finding); a cell option the engine does not take or a value of it that
    its options class refuses (:func:`workbench.cells.check_options`); a model or cell options given to a static
    probe; a token count given that no sequence of the model holds (:func:`check_context`)."""
    if probe.needs_engine:
        models.check(model)
        if cell_options:
            try:
                cells.check_options(engine, cell_options)
            except (TypeError, ValueError) as e:
                raise ParamError(str(e)) from None
        check_context(probe, p, given, model)
    elif cell_options or model != models.DEFAULT_MODEL:
        raise ParamError(f"probe {probe.name} reads the installed {engine} package and runs no model: "
                         "drop --model and --cell (-c)")


RESTING = (Verdict.CONFIRMED, Verdict.REFUTED, Verdict.PARTIAL)  # verdicts that must rest on a number read from the engine
NO_ENGINE_WORD = ("on the claim's subject, not-applicable needs the engine's own word (a symbol missing from the "
                  "installed package, a request it refused, a documented field absent from its answer) recorded as a "
                  "support; the cell's own list of absent mechanisms is not that")


def must_rest(verdict: str, supports: Sequence[Support], subject: bool) -> bool:
    """Whether ``verdict`` stands only on supports that hold: an answer always; ``not-applicable`` on the claim's
    subject (where a cell's absence list could otherwise settle a claim), and wherever supports were stated (the
    contradicting-metric guard applies to it too)."""
    return verdict in RESTING or (verdict == Verdict.NOT_APPLICABLE and (subject or bool(supports)))


def unfit(verdict: str, values: Mapping[str, Any], supports: Sequence[Support],
          sources: Mapping[str, str] | None = None, subject: bool = False) -> list[str]:
    """Why ``supports`` cannot carry ``verdict`` (:func:`workbench.metrics.unfit_to_rest_on`); none stated: the rule
    named nothing, or (not-applicable) the engine said nothing. On the subject, not-applicable rests on the engine's
    word that the mechanism is absent (:data:`workbench.metrics.ABSENCE`), not on another reading beside it."""
    if verdict == Verdict.NOT_APPLICABLE and subject and not any(s.metric in metrics.ABSENCE for s in supports):
        return [NO_ENGINE_WORD]
    if supports:
        return metrics.unfit_to_rest_on(values, supports, sources)
    return ["the rule named no engine-read number it rests on"]


def at_most_inconclusive_without_engine(o: Outcome, subject: bool = False) -> Outcome:
    """An answer is only as good as the values its rule says it rests on (``Outcome.rests_on``, or a claim row's
    own ``claim_rests_on``): unless each is read from the engine, finite and holds the value that supports the
    verdict, the answer becomes inconclusive, and its summary says why. A count the cell computed itself, a
    timing or a parameter echo cannot confirm anything, and neither can an engine reading that contradicts it.
    On the claim's ``subject`` engine the same holds for ``not-applicable`` (:func:`must_rest`)."""
    def why_not(verdict: str, supports: tuple[Support, ...]) -> list[str]:
        return unfit(verdict, o.metrics, supports, o.sources, subject) if must_rest(verdict, supports, subject) else []

    why = why_not(o.verdict, o.rests_on)
    rows = {c: why_not(v, o.claim_rests_on.get(c, o.rests_on)) for c, v in o.claim_verdicts.items()}
    rows = {c: w for c, w in rows.items() if w}
    if not why and not rows:
        return o
    said = dict.fromkeys([*why, *(f"{c}: {w}" if c in o.claim_rests_on else w for c, ws in rows.items() for w in ws)])
    reasons = row_reasons(o)
    return dataclasses.replace(
        o, verdict="inconclusive" if why else o.verdict,
        summary=o.summary + f" (At most inconclusive: {'; '.join(said)}.)",
        claim_verdicts={c: "inconclusive" if c in rows else v for c, v in o.claim_verdicts.items()},
        claim_reasons=reasons | {c: f"{reasons[c]} (At most inconclusive: {'; '.join(ws)}.)" for c, ws in rows.items()})


def row_reasons(o: Outcome) -> dict[str, str]:
    """Each claim row with a verdict of its own, with its one-line reason: the rule's words for it
    (``Outcome.claim_reasons``); else the summary, where the row's verdict is the finding's; else what the row rests
    on (:func:`workbench.findings.rests_words`), so a probe that names no row's reason still never shows a row beside
    words about another verdict."""
    values = findings.metric_values(o.metrics, o.sources)
    out = {}
    for c, v in o.claim_verdicts.items():
        words = o.claim_reasons.get(c) or (o.summary if v == o.verdict else findings.rests_words(
            v, findings.supports_doc(o.claim_rests_on.get(c, o.rests_on)), values))
        out[c] = " ".join((words or f"{v} on this row; the rule gave it no words and it rests on no reading").split())
    return out


def is_subject(engine: str, claim_ids: Sequence[str]) -> bool:
    """Whether ``engine`` runs the subject of any of these claims (``trtllm-serve`` runs ``trtllm``)."""
    return any(cells.runs(engine) == claims.get(c).subject for c in claim_ids)


class UndeclaredRest(WorkbenchError):
    """A probe's rule rested a verdict on supports its declaration (``Probe.rests``) does not list: a bug in the
    probe, caught where its finding is written, so no reader could re-derive it."""


def check_rests(probe: Declared, o: Outcome, subject: bool) -> None:
    """Every verdict the guard let stand rests on supports the probe declares for it (:func:`metrics.undeclared`)."""
    rows = {c: o.claim_verdicts.get(c, o.verdict) for c in dict.fromkeys([*probe.claims, *o.claim_verdicts])}
    for c, v in rows.items():
        supports = o.claim_rests_on.get(c, o.rests_on)
        if must_rest(v, supports, subject):
            why = metrics.undeclared(probe.rests, c, v, supports)
            if why:
                raise UndeclaredRest(f"probe {probe.name}: {why}; declare it in {type(probe).__name__}.rests")


def _finding(probe: Probe, ctx: ProbeContext, p: Any, o: Outcome, reason: str | None) -> findings.Finding:
    d = ctx.description
    avail = cells.availability(ctx.engine) if d is None and ctx.engine in cells.engines() else None
    version = d.engine_version if d else avail.version if avail else None
    double = d.extra.get("test_double") if d else avail.details.get("test_double") if avail else None
    extra = ({"cell": _cell_doc(d)} if d else {}) | ({"test_double": double} if double else {})
    env = environment.fingerprint(ctx.engine, version, ctx.resolved, d.geometry if d else None, extra or None)
    columns = list(dict.fromkeys(k for r in o.rows for k in r))
    for cid in (*probe.claims, *o.claim_verdicts):
        claims.get(cid)
    return findings.Finding(
        probe=probe.name, probe_version=probe.version, claims=list(dict.fromkeys([*probe.claims, *o.claim_verdicts])),
        verdict=o.verdict, summary=o.summary, engine=ctx.engine, environment=env,
        params=_plain(dataclasses.asdict(p)) | {"model": ctx.model}, cell_options=redacted(ctx.cell_options),
        metrics=findings.metric_values(o.metrics, o.sources),
        evidence={"columns": columns, "rows": o.rows, "notes": o.notes},
        reason=reason, claim_verdicts=dict(o.claim_verdicts), rests_on=findings.supports_doc(o.rests_on),
        claim_rests_on={c: findings.supports_doc(s) for c, s in o.claim_rests_on.items()}, claim_reasons=row_reasons(o),
        result_class=classes.for_verdict(o.verdict, probe.result_class),
    )


SECRET_OPTIONS = ("api_key",)
"""Cell options a finding records as ``<redacted>``: a finding is shared, a key is not."""


def redacted(options: Mapping[str, Any]) -> dict:
    return {k: "<redacted>" if k in SECRET_OPTIONS and v else v for k, v in options.items()}


def _plain(d: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def _cell_doc(d: Description) -> dict:
    return {"context_tokens": d.context_tokens, "kv_capacity_tokens": d.kv_capacity_tokens,
            "kv_capacity_bytes": d.kv_capacity_bytes, "block_tokens": d.block_tokens, "slots": d.slots,
            "observers": list(d.observers), "switchable": dict(d.switchable), "extra": dict(d.extra),
            "absent": dict(d.absent)}


CONTEXT = "context"  # a bound: the most tokens one sequence of the model holds (:func:`models.context_ceiling`)


@dataclass(frozen=True)
class Bound:
    """Where a numeric parameter (each item of a tuple) may lie: at least ``low``; at most ``high``, a number or
    :data:`CONTEXT`. Declared once on the parameter (:func:`param`); ``low`` and a numeric ``high`` are checked where
    the parameters are read (:func:`parse_params`), :data:`CONTEXT` against the model before anything runs
    (:func:`check_context`)."""

    low: float | None = None
    high: float | str | None = None

    def __str__(self) -> str:
        return f"{'' if self.low is None else self.low} … {'' if self.high is None else self.high}".strip()


COUNT = Bound(1)  # a count of things (requests, slots, blocks): zero or fewer is no experiment
TOKENS = Bound(1, CONTEXT)  # tokens in one sequence: a prompt, a prefix, a tail, a block
SEED = Bound(0, 2**32 - 1)  # a random seed: numpy's generators refuse a negative one, engines take 32 bits


def param(default: Any, help: str, bound: Bound | None = None,
          check: Callable[[Any, str], None] | None = None) -> Any:
    """A probe parameter with its help text (shown by the CLI and notebooks), for a number its :class:`Bound`, and
    a ``check(value, what)`` that raises ValueError where a value given cannot be one (a PYTHONHASHSEED)."""
    meta = {"help": help, "bound": bound, "check": check}
    if isinstance(default, (list, tuple)):
        return field(default_factory=lambda: tuple(default), metadata=meta)
    return field(default=default, metadata=meta)


def _bounded(probe: Probe) -> list[tuple[str, Bound]]:
    return [(f.name, f.metadata["bound"]) for f in dataclasses.fields(probe.Params) if f.metadata.get("bound")]


def _items(v: Any) -> tuple:
    return v if isinstance(v, tuple) else (v,)


def check_bounds(probe: Probe, values: Mapping[str, Any]) -> None:
    """Every bounded value given lies within its parameter's :class:`Bound` (``low``, and ``high`` where it is a
    number), or a :class:`ParamError` naming the parameter, before anything runs."""
    for key, b in _bounded(probe):
        for x in _items(values.get(key, ())):
            if x is None:
                continue
            if b.low is not None and x < b.low:
                raise ParamError(f"probe {probe.name}: parameter {key}={x!r} must be at least {b.low}")
            if isinstance(b.high, (int, float)) and x > b.high:
                raise ParamError(f"probe {probe.name}: parameter {key}={x!r} must be at most {b.high}")
    for f in dataclasses.fields(probe.Params):
        if f.metadata.get("check") and f.name in values:
            try:
                f.metadata["check"](values[f.name], f"parameter {f.name}")
            except ValueError as e:
                raise ParamError(f"probe {probe.name}: {e}") from None


def check_context(probe: Probe, p: Any, given: set[str], model: str) -> None:
    """Every value given to a parameter bounded by :data:`CONTEXT`, and the longest sequence the parameters given
    ask for together (:meth:`Probe.longest`), fits the model's context (its own metadata, read without loading it),
    so a token count no sequence can hold is refused before a cell opens, not found by the engine after it ran (a
    32,000,001-token prompt ran 16 s to the overflow: issue 36). A probe's defaults are its own to size, and a run
    that gives none resolves nothing here."""
    bounded = [k for k, b in _bounded(probe) if b.high == CONTEXT and k in given]
    longest = probe.longest(p) if given else None
    if not bounded and longest is None:
        return
    ceiling = models.context_ceiling(models.resolve(model))
    if ceiling is None:
        return
    for key in bounded:
        over = [x for x in _items(getattr(p, key)) if x is not None and x > ceiling]
        if over:
            raise ParamError(f"probe {probe.name}: parameter {key}={over[0]} exceeds the context of model {model} "
                             f"({ceiling} tokens, from its own metadata); nothing was run")
    if longest is not None and longest[0] > ceiling:
        raise ParamError(f"probe {probe.name}: {longest[1]} = {longest[0]} tokens exceeds the context of model "
                         f"{model} ({ceiling} tokens, from its own metadata); nothing was run")
