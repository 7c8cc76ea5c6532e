"""Findings: the schema, the environment fingerprint, and the on-disk store.

One JSON file per finding, validated against ``finding.schema.json``. Files are written atomically
and never overwritten (ids are unique); loading skips corrupt files and reports them, and a finding
met twice (the same id in two folders) counts once.

Schema v2 records provenance apart: ``probe_version``, the probe's ``params`` and the run's
``cell_options`` are separate fields, and every metric carries its ``source`` (engine, cell or
derived). v3 adds the supports each verdict rests on (``rests_on``, ``claim_rests_on``), so whatever reads a
finding can re-check its verdict (:mod:`workbench.settle`) instead of believing its verdict string. v4 adds each
claim row's own one-line reason (``claim_reasons``) where a row has a verdict of its own: the rule's words for that
row, so a report never shows the finding's summary beside a row it does not speak to; a row that carries the
finding's verdict has the summary as its reason. Findings written under v1 to v3 still load: :func:`upgrade` reads
them into the v4 shape, with no supports recorded (v1, v2) and a row's reason derived from the supports it rests on,
else recorded as absent (``None``), never made up. Within v4, ``result_class`` (benchmark integrity's class of the
finding and every row it holds, :mod:`workbench.certify.classes`) is an additive, optional field: a finding written
before it is read with its writer's declared class (:func:`workbench.certify.integrity.result_class`); one that names
``contenox_product_path`` without the contenox runtime that drove it, or a performance class on a run that measured
nothing, is refused.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import textwrap
import uuid
import warnings
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping

import jsonschema

from . import claims as _claims
from . import ledger as _ledger
from . import metrics as _metrics
from .certify import classes as _classes
from .engine import Verdict, WorkbenchError
from .environment import now_iso
from .files import atomic_write, read_regular

SCHEMA_ID = "workbench.finding/v4"
OLD_SCHEMAS = ("workbench.finding/v1", "workbench.finding/v2", "workbench.finding/v3")
SCHEMA_FAMILY = "workbench.finding/"
#: ``workbench run`` sets this for each notebook's attempt; every finding written under it carries the id, so a
#: resume sets aside exactly what an unfinished attempt wrote (never another engine's or notebook's findings).
ATTEMPT_ENV = "WORKBENCH_ATTEMPT"


class FindingError(WorkbenchError):
    """A finding that does not satisfy the schema."""


class FindingNotSaved(WorkbenchError):
    """The experiment ran but its findings could not be written where asked. ``recovered`` lists where each one
    was kept instead (``None``: nowhere, its JSON is in ``docs``, for the caller to print)."""

    def __init__(self, folder: Path, reason: str, recovered: list[Path | None], docs: list[str]) -> None:
        self.folder, self.reason, self.recovered, self.docs = folder, reason, recovered, docs
        kept = [str(p) for p in recovered if p is not None]
        where = (f"saved instead to {', '.join(kept)}: move {'it' if len(kept) == 1 else 'them'} into a findings folder"
                 if kept else "")
        lost = len(recovered) - len(kept)
        if lost:
            where += ("; " if where else "") + (f"{lost} could be saved nowhere (nor in {recovery_dir()}): its JSON "
                                                "follows, save it by hand")
        super().__init__(f"{len(recovered)} finding(s) could not be written to {folder} ({reason}); {where}")


@lru_cache(maxsize=1)
def schema() -> dict:
    """The finding schema, its closed vocabularies filled from their one home: verdicts from
    :class:`~workbench.engine.Verdict`, metric sources from :data:`workbench.metrics.SOURCES`, result classes from
    :data:`workbench.certify.classes.LABELS`."""
    doc = json.loads(resources.files("workbench").joinpath("finding.schema.json").read_text())
    doc["$defs"]["verdict"]["enum"] = [v.value for v in Verdict]
    doc["properties"]["metrics"]["additionalProperties"]["properties"]["source"]["enum"] = list(_metrics.SOURCES)
    doc["properties"]["result_class"]["enum"] = list(_classes.LABELS)
    return doc


@dataclass
class Finding:
    probe: str
    claims: list[str]
    verdict: str
    summary: str
    engine: str
    environment: dict
    probe_version: str = "0"
    params: dict = field(default_factory=dict)
    cell_options: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)  # tag -> {"value", "unit", "source"}
    evidence: dict = field(default_factory=dict)  # {"columns", "rows", "files", "notes"}
    reason: str | None = None
    claim_verdicts: dict = field(default_factory=dict)
    rests_on: list = field(default_factory=list)  # [{"metric", "op", "value"}]: what the verdict rests on
    claim_rests_on: dict = field(default_factory=dict)  # claim id -> supports of that claim row's own verdict
    claim_reasons: dict = field(default_factory=dict)  # claim id (of claim_verdicts) -> its row's reason; None: absent
    id: str = ""
    created: str = ""
    schema: str = SCHEMA_ID
    attempt: str | None = None  # the ``workbench run`` attempt that wrote it (ATTEMPT_ENV)
    # benchmark integrity's class of every row it holds (workbench.certify.classes); None: written before it was
    # recorded, and its writer's declared class is read instead (workbench.certify.integrity.result_class)
    result_class: str | None = None
    # the digest of the document it was read from (workbench.ledger.digest); None: not read from a file (made by this
    # process). Not part of the finding's JSON: what binds a file to its run (workbench.settle) compares it.
    digest: str | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.created = self.created or now_iso()
        self.attempt = self.attempt or os.environ.get(ATTEMPT_ENV) or None
        # a row without a verdict of its own has the summary as its reason: a finding restated without that row's
        # verdict (dataclasses.replace) keeps no reason for it (a file that gives one is refused by validate)
        self.claim_reasons = {c: r for c, r in self.claim_reasons.items() if c in self.claim_verdicts}
        if self.result_class is not None and self.verdict in _classes.NO_CLAIM:  # a run restated as measuring nothing
            self.result_class = _classes.ResultClass.FAILED.value
        if not self.id:
            stamp = self.created.replace("-", "").replace(":", "").replace("+0000", "Z").split("+")[0]
            self.id = f"{self.probe}-{self.engine}-{stamp}-{uuid.uuid4().hex[:8]}"

    @property
    def engine_version(self) -> str | None:
        return self.environment.get("engine_version")

    def metric(self, tag: str) -> Any:
        m = self.metrics.get(tag)
        return None if m is None else m["value"]

    def verdict_on(self, claim_id: str) -> str:
        """The verdict this finding gives ``claim_id``: its claim row's own, else the finding's."""
        return self.claim_verdicts.get(claim_id, self.verdict)

    def reason_on(self, claim_id: str) -> str | None:
        """The one-line reason for the verdict on ``claim_id``: its claim row's own where the row has a verdict of its
        own (``None`` where that was not recorded: a finding from before v4), else the finding's summary."""
        return self.claim_reasons.get(claim_id) if claim_id in self.claim_verdicts else self.summary

    def supports_of(self, claim_id: str) -> tuple[_metrics.Support, ...]:
        """The recorded supports of the verdict on ``claim_id`` (its claim row's own, else the finding's)."""
        docs = self.claim_rests_on.get(claim_id, self.rests_on)
        return tuple(_metrics.Support(d["metric"], d["op"], d["value"]) for d in docs)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("digest")
        for optional in ("claim_verdicts", "attempt", "rests_on", "claim_rests_on", "claim_reasons", "result_class"):
            if not d[optional]:
                d.pop(optional)
        return d

    def validate(self) -> "Finding":
        validate(self.to_dict())
        return self


def model_of(f: Finding) -> str:
    """The model a finding ran on (its resolved name, else the spec it was given)."""
    return (f.environment.get("model") or {}).get("name") or str(f.params.get("model", ""))


def has_gpu(f: Finding) -> bool:
    """Whether the finding's own fingerprint records a GPU (NVML's devices, :func:`workbench.environment.gpus`)."""
    hardware = f.environment.get("hardware")
    gpu = hardware.get("gpu") if isinstance(hardware, dict) else None
    return isinstance(gpu, dict) and gpu.get("available") is True and bool(gpu.get("devices"))


def short_reason(reason: str | None, width: int = 60) -> str:
    """A not-run reason in a few words: its head before the first colon or sentence end (the rest is how to
    install), cut at a word to ``width`` characters; what a figure's caption, the loop's table and the report's one
    line per engine show."""
    text = " ".join((reason or "no reason recorded").split())
    head = re.split(r": |\. |; ", text, maxsplit=1)[0].rstrip(".")
    return head if len(head) <= width else textwrap.shorten(head, width, placeholder=" …")


def supports_doc(supports: Iterable[_metrics.Support]) -> list[dict]:
    """Supports as the finding records them."""
    return [{"metric": s.metric, "op": s.op, "value": s.value} for s in supports]


def rests_words(verdict: str, supports: Iterable[Mapping[str, Any]], values: Mapping[str, Any]) -> str | None:
    """A claim row's reason derived from what its verdict rests on (the row gave no words of its own): each support
    with the value the finding read; None where it rests on nothing (then the reason is absent, not made up)."""
    said = [f"{_metrics.METRICS[s['metric']].header if s['metric'] in _metrics.METRICS else s['metric']} "
            f"{s['op']} {s['value']} (read: {(values.get(s['metric']) or {}).get('value', 'not recorded')})"
            for s in supports]
    return f"{verdict}, resting on {'; '.join(said)}" if said else None


def metric_values(values: Mapping[str, Any], sources: Mapping[str, str] | None = None) -> dict:
    """``{tag: value}`` → ``{tag: {"value", "unit", "source"}}`` from the declarations (unknown tags fail); the
    source is the run's own where ``sources`` records one (the values behind it came from elsewhere)."""
    out = {}
    for tag, v in values.items():
        if hasattr(v, "item"):  # numpy scalars
            v = v.item()
        m = _metrics.get(tag)
        if (sources or {}).get(tag, m.source) == "engine" != m.source and not m.varies:
            raise ValueError(f"metric {tag} is declared {m.source}-sourced on every engine, but this run records it "
                             "as the engine's: declare it varies=True in workbench.metrics if that is so")
        out[tag] = {"value": v, "unit": m.unit.value, "source": _metrics.source_of(tag, sources)}
    return out


def upgrade(doc: Mapping[str, Any]) -> dict:
    """A v1 finding in the v2 shape: the claim sentence dropped (``claims`` holds the ids), cell options
    left inside ``params`` (v1 did not tell them apart), probe version unknown, and each metric's
    source taken from today's declaration (``cell`` when the tag is no longer declared)."""
    doc = dict(doc)
    if doc.get("schema") not in OLD_SCHEMAS:
        return doc
    if doc["schema"] in ("workbench.finding/v2", "workbench.finding/v3"):  # v3 adds the optional supports, v4 reasons
        return _rows_reasoned(doc | {"schema": SCHEMA_ID})
    doc.pop("claim", None)
    doc["schema"] = SCHEMA_ID
    doc.setdefault("probe_version", "0")
    doc.setdefault("cell_options", {})
    doc["metrics"] = {t: {"source": _metrics.METRICS[t].source if t in _metrics.METRICS else "cell", **m}
                      for t, m in (doc.get("metrics") or {}).items()}
    return _rows_reasoned(doc)


def _rows_reasoned(doc: dict) -> dict:
    """A pre-v4 finding's claim rows with a verdict of their own, each with its reason derived from the supports it
    recorded (its own, else the finding's), or ``None``: not recorded."""
    own = doc.get("claim_rests_on") or {}
    rows = doc.get("claim_verdicts") or {}
    if not isinstance(rows, dict) or not isinstance(own, dict):
        return doc  # the schema names what is wrong
    try:
        return doc | {"claim_reasons": {c: rests_words(v, own.get(c, doc.get("rests_on") or []), doc.get("metrics") or {})
                                        for c, v in rows.items()}}
    except (TypeError, KeyError, AttributeError):  # supports shaped unlike the schema's: it names what is wrong
        return doc

@lru_cache(maxsize=1)
def _validator() -> Any:
    """The schema's validator, the schema itself checked once: ``jsonschema.validate`` checks it against the
    metaschema on every call, 80 ms a finding on 2 cores (4 s to read a run's 55 findings)."""
    cls = jsonschema.validators.validator_for(schema())
    cls.check_schema(schema())
    return cls(schema())


def validate(doc: Mapping[str, Any]) -> None:
    e = jsonschema.exceptions.best_match(_validator().iter_errors(doc))  # the error jsonschema.validate raises
    if e is not None:
        where = "/".join(str(p) for p in e.absolute_path) or "<root>"
        raise FindingError(f"finding is invalid at {where}: {e.message}")
    for cid in list(doc["claims"]) + list(doc.get("claim_verdicts", {})):
        if cid not in _claims.CLAIMS:
            raise FindingError(f"finding cites unknown claim {cid!r}")
    wrong = _classes.problem(doc.get("result_class"), doc["verdict"], doc.get("environment") or {})
    if wrong:
        raise FindingError(f"finding's result class cannot stand: {wrong}")
    stray = set(doc.get("claim_reasons", {})) - set(doc.get("claim_verdicts", {}))
    if stray:
        raise FindingError(f"finding gives a reason to {', '.join(sorted(stray))}, which has no verdict of its own "
                           "(a row that carries the finding's verdict has its summary as reason)")


def from_dict(doc: Mapping[str, Any]) -> Finding:
    doc = upgrade(doc)
    validate(doc)
    return Finding(**{k: v for k, v in doc.items()})


# --------------------------------------------------------------------------- store


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (Path, _dt.datetime)):
        return str(o)
    raise TypeError(f"cannot serialise {type(o).__name__} in a finding")


def strict(doc: Any, where: str = "") -> tuple[Any, list[str]]:
    """``doc`` with every non-finite float (NaN, ±inf) as ``None``, and where each one was: strict JSON, which
    strict parsers (JavaScript's ``JSON.parse``) accept and no reader can mistake for a measured number."""
    if isinstance(doc, float) and not math.isfinite(doc):
        return None, [f"{where or '<root>'} ({doc})"]
    if isinstance(doc, dict):
        pairs = [(k, strict(v, f"{where}.{k}" if where else str(k))) for k, v in doc.items()]
        return {k: v for k, (v, _) in pairs}, [w for _, (_, ws) in pairs for w in ws]
    if isinstance(doc, list):
        items = [strict(v, f"{where}[{i}]") for i, v in enumerate(doc)]
        return [v for v, _ in items], [w for _, ws in items for w in ws]
    return doc, []


def to_json(finding: Finding) -> str:
    """The finding as validated, strict JSON; non-finite numbers become ``null`` with a note in the evidence."""
    doc, nonfinite = strict(json.loads(json.dumps(finding.to_dict(), default=_json_default)))
    if nonfinite:
        notes = doc.setdefault("evidence", {}).setdefault("notes", [])
        notes.append(f"non-finite numbers written as null (not measurements): {', '.join(nonfinite)}")
    validate(doc)
    return json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"


def recovery_dir() -> Path:
    """Where a finding goes when its folder cannot take it (the user's temp folder, per user: not a command's own
    temp root, which goes with the command, :func:`workbench.lifecycle.base_tempdir`)."""
    from .lifecycle import base_tempdir

    return base_tempdir() / f"workbench-recovered-{os.getuid()}"


def recovered() -> list[Path]:
    """The findings kept in :func:`recovery_dir` (none when it is absent): ``workbench findings`` names them, so that
    a finding that could not be written where asked is not forgotten there."""
    return sorted(recovery_dir().glob("*.json"))


def write(finding: Finding, directory: str | os.PathLike) -> Path:
    """Validate and write atomically as ``<id>.json``, its digest recorded in the folder's ledger
    (:mod:`workbench.ledger`: what binds it to the run that wrote it); refuses to overwrite an existing finding.

    When the folder cannot be written (read-only, full, gone), the finding is kept in :func:`recovery_dir` and
    :class:`FindingNotSaved` names where: the experiment already ran, its result must not be lost."""
    d = Path(directory)
    text = to_json(finding)
    target = d / f"{finding.id}.json"
    recorded = _ledger.entry(finding.id, _ledger.digest(json.loads(text)), finding.attempt, now_iso())
    if target.exists():
        raise FindingError(f"{target} already exists; findings are never overwritten")
    try:
        d.mkdir(parents=True, exist_ok=True)
        _ledger.append(d, [recorded])
        return atomic_write(target, text, mode=0o600, overwrite=False)
    except FileExistsError:
        raise FindingError(f"{target} already exists; findings are never overwritten") from None
    except OSError as e:
        reason = e.strerror or str(e)
    try:
        rescue = recovery_dir()
        rescue.mkdir(mode=0o700, exist_ok=True)
        _ledger.append(rescue, [recorded])
        recovered = atomic_write(rescue / target.name, text, mode=0o600, overwrite=False)
    except OSError:
        recovered = None
    raise FindingNotSaved(d, reason, [recovered], [text])


def write_all(found: Iterable[Finding], directory: str | os.PathLike) -> list[Path]:
    """:func:`write` each finding; when some cannot be written, every one is still tried (and kept in the
    recovery folder) before one :class:`FindingNotSaved` names them all."""
    paths, failed = [], []
    for f in found:
        try:
            paths.append(write(f, directory))
        except FindingNotSaved as e:
            failed.append(e)
    if failed:
        raise FindingNotSaved(Path(directory), failed[0].reason, [p for e in failed for p in e.recovered],
                              [d for e in failed for d in e.docs])
    return paths


@dataclass
class Scan:
    findings: list[tuple[Path, Finding]]
    errors: list[tuple[Path, str]]


def read(path: str | os.PathLike) -> Finding | None:
    """The finding in file ``path``; ``None`` for JSON that is not a finding (e.g. a run manifest).

    Raises :class:`FindingError` (one line naming the problem) for a file that is not a regular file, is not
    UTF-8 JSON, nests too deeply, or carries a finding schema this version does not know."""
    try:
        doc = json.loads(read_regular(path).decode("utf-8"))
    except OSError as e:
        raise FindingError(f"cannot read it: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise FindingError(f"not UTF-8 ({e.reason} at byte {e.start})") from None
    except RecursionError:
        raise FindingError("JSON nested too deeply to be a finding") from None
    except ValueError as e:
        raise FindingError(f"not JSON: {e}") from None
    schema_id = doc.get("schema") if isinstance(doc, dict) else None
    if not isinstance(schema_id, str) or not schema_id.startswith(SCHEMA_FAMILY):
        if isinstance(doc, dict) and {"probe", "verdict", "engine"} <= doc.keys():  # shaped like one: never silently
            raise FindingError(f"it reads like a finding but its schema is {schema_id!r}, not one this workbench reads "
                               f"({', '.join((*OLD_SCHEMAS, SCHEMA_ID))}): fix its schema or move it out of the folder")
        return None
    if schema_id not in (SCHEMA_ID, *OLD_SCHEMAS):
        raise FindingError(f"schema {schema_id} is not one this workbench reads ({', '.join((*OLD_SCHEMAS, SCHEMA_ID))});"
                           " it was written by a newer workbench: upgrade to read it")
    try:
        finding = from_dict(doc)
    except (TypeError, ValueError, RecursionError) as e:
        raise FindingError(f"not a valid finding: {type(e).__name__}: {e}") from None
    finding.digest = _ledger.digest(doc)
    return finding


def scan(paths: Iterable[str | os.PathLike]) -> Scan:
    """Read every ``*.json`` finding under the given files/directories; files that cannot be read as a finding go
    to ``errors`` (each with a one-line reason), so one bad file never hides the others."""
    found: dict[str, tuple[Path, Finding]] = {}
    errors, clashed = [], set()
    for p in map(Path, paths):
        files = sorted(p.rglob("*.json")) if p.is_dir() else [p]
        for f in files:
            if f.name.startswith(".") or f.name in {"manifest.json", "run.json"}:
                continue
            try:
                finding = read(f)
            except FindingError as e:
                errors.append((f, " ".join(str(e).split())))
                continue
            if finding is None:
                continue  # not a finding
            first = found.get(finding.id)
            if finding.id in clashed or (first is not None and first[1] != finding):
                # one id, two contents: which is the finding cannot be told, so neither counts
                errors += [(q, f"finding id {finding.id} is also in {f if q != f else first[0]} with other contents; "
                               "neither counts") for q in ([first[0]] if first else []) + [f]]
                found.pop(finding.id, None)
                clashed.add(finding.id)
            elif first is None:
                found[finding.id] = (f, finding)  # the same finding given twice counts once
    return Scan(list(found.values()), errors)


def load(*paths: str | os.PathLike):
    """Findings under ``paths`` as a pandas DataFrame, one row per finding; corrupt files warn and are skipped."""
    s = scan(paths)
    for f, err in s.errors:
        warnings.warn(f"skipping corrupt finding {f}: {err}", stacklevel=2)
    return table(s)


def table(s: Scan):
    """The flat table of scanned findings (:func:`load`'s): one row per finding, its metrics as ``metric.TAG``."""
    import pandas as pd

    rows = []
    for path, fd in s.findings:
        env = fd.environment
        rows.append({
            "id": fd.id, "probe": fd.probe, "engine": fd.engine,
            "engine_version": env.get("engine_version"), "verdict": fd.verdict, "summary": fd.summary,
            "reason": fd.reason, "model": (env.get("model") or {}).get("name"),
            "hardware": (env.get("hardware") or {}).get("summary"),
            "created": fd.created, "claims": list(fd.claims), "path": str(path),
            **{f"metric.{k}": v["value"] for k, v in fd.metrics.items()},
        })
    cols = ["id", "probe", "engine", "engine_version", "verdict", "summary", "reason", "model", "hardware",
            "created", "claims", "path"]
    df = pd.DataFrame(rows, columns=cols + sorted({k for r in rows for k in r} - set(cols)))
    return df.sort_values(["probe", "engine", "created"], kind="stable").reset_index(drop=True)
