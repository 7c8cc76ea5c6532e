"""Findings: the schema, the environment fingerprint, and the on-disk store.

One JSON file per finding, validated against ``finding.schema.json``. Files are written atomically
and never overwritten (ids are unique); loading skips corrupt files and reports them, and a finding
met twice (the same id in two folders) counts once.

Schema v2 records provenance apart: ``probe_version``, the probe's ``params`` and the run's
``cell_options`` are separate fields, and every metric carries its ``source`` (engine, cell or
derived). Findings written under v1 still load: :func:`upgrade` reads them into the v2 shape.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import uuid
import warnings
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping

import jsonschema

from . import claims as _claims
from . import metrics as _metrics
from .contract import WorkbenchError
from .files import atomic_write

SCHEMA_ID = "workbench.finding/v2"
OLD_SCHEMAS = ("workbench.finding/v1",)
VERDICTS = ("confirmed", "refuted", "partial", "inconclusive", "not-applicable", "not-run")


class FindingError(WorkbenchError):
    """A finding that does not satisfy the schema."""


@lru_cache(maxsize=1)
def schema() -> dict:
    return json.loads(resources.files("workbench").joinpath("finding.schema.json").read_text())


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


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
    id: str = ""
    created: str = ""
    schema: str = SCHEMA_ID

    def __post_init__(self) -> None:
        self.created = self.created or now_iso()
        if not self.id:
            stamp = self.created.replace("-", "").replace(":", "").replace("+0000", "Z").split("+")[0]
            self.id = f"{self.probe}-{self.engine}-{stamp}-{uuid.uuid4().hex[:8]}"

    @property
    def engine_version(self) -> str | None:
        return self.environment.get("engine_version")

    def metric(self, tag: str) -> Any:
        m = self.metrics.get(tag)
        return None if m is None else m["value"]

    def to_dict(self) -> dict:
        d = asdict(self)
        if not d["claim_verdicts"]:
            d.pop("claim_verdicts")
        return d

    def validate(self) -> "Finding":
        validate(self.to_dict())
        return self


def metric_values(values: Mapping[str, Any], sources: Mapping[str, str] | None = None) -> dict:
    """``{tag: value}`` → ``{tag: {"value", "unit", "source"}}`` from the declarations (unknown tags fail); the
    source is the run's own where ``sources`` records one (the values behind it came from elsewhere)."""
    out = {}
    for tag, v in values.items():
        if hasattr(v, "item"):  # numpy scalars
            v = v.item()
        m = _metrics.get(tag)
        out[tag] = {"value": v, "unit": m.unit.value, "source": _metrics.source_of(tag, sources)}
    return out


def upgrade(doc: Mapping[str, Any]) -> dict:
    """A v1 finding in the v2 shape: the claim sentence dropped (``claims`` holds the ids), cell options
    left inside ``params`` (v1 did not tell them apart), probe version unknown, and each metric's
    source taken from today's declaration (``cell`` when the tag is no longer declared)."""
    doc = dict(doc)
    if doc.get("schema") not in OLD_SCHEMAS:
        return doc
    doc.pop("claim", None)
    doc["schema"] = SCHEMA_ID
    doc.setdefault("probe_version", "0")
    doc.setdefault("cell_options", {})
    doc["metrics"] = {t: {"source": _metrics.METRICS[t].source if t in _metrics.METRICS else "cell", **m}
                      for t, m in (doc.get("metrics") or {}).items()}
    return doc


def validate(doc: Mapping[str, Any]) -> None:
    try:
        jsonschema.validate(doc, schema())
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "<root>"
        raise FindingError(f"finding is invalid at {where}: {e.message}") from None
    for cid in list(doc["claims"]) + list(doc.get("claim_verdicts", {})):
        if cid not in _claims.CLAIMS:
            raise FindingError(f"finding cites unknown claim {cid!r}")


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


def write(finding: Finding, directory: str | os.PathLike) -> Path:
    """Validate and write atomically as ``<id>.json``; refuses to overwrite an existing finding."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    doc = json.loads(json.dumps(finding.to_dict(), default=_json_default))
    validate(doc)
    target = d / f"{finding.id}.json"
    try:
        return atomic_write(target, json.dumps(doc, indent=2, sort_keys=True) + "\n", mode=0o600, overwrite=False)
    except FileExistsError:
        raise FindingError(f"{target} already exists; findings are never overwritten") from None


@dataclass
class Scan:
    findings: list[tuple[Path, Finding]]
    errors: list[tuple[Path, str]]


def scan(paths: Iterable[str | os.PathLike]) -> Scan:
    """Read every ``*.json`` finding under the given files/directories; corrupt ones go to ``errors``."""
    found, errors, seen = [], [], set()
    for p in map(Path, paths):
        files = sorted(p.rglob("*.json")) if p.is_dir() else [p]
        for f in files:
            if f.name.startswith(".") or f.name in {"manifest.json", "run.json"}:
                continue
            try:
                doc = json.loads(f.read_text())
                if not isinstance(doc, dict) or doc.get("schema") not in (SCHEMA_ID, *OLD_SCHEMAS):
                    continue  # not a finding (e.g. a run manifest)
                finding = from_dict(doc)
                if finding.id in seen:
                    continue  # the same finding given twice counts once
                seen.add(finding.id)
                found.append((f, finding))
            except (OSError, ValueError, FindingError, TypeError) as e:
                errors.append((f, str(e)))
    return Scan(found, errors)


def load(*paths: str | os.PathLike):
    """Findings under ``paths`` as a pandas DataFrame, one row per finding; corrupt files warn and are skipped."""
    import pandas as pd

    s = scan(paths)
    for f, err in s.errors:
        warnings.warn(f"skipping corrupt finding {f}: {err}", stacklevel=2)
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
