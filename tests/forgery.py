"""Forgeries of real findings, as issue 48's adversary made them, and the places each must say it settles nothing:
the written-back blueprint and gateway guide, ``workbench findings`` and the report."""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path
from typing import Callable

from typer.testing import CliRunner

from workbench import blueprint, claims, findings, report, standing
from workbench.cli import app
from workbench.events import guide

DATA = Path(__file__).resolve().parents[1] / "data"


def run_folder(tmp: Path, *sources: Path) -> Path:
    """A run folder whose ``findings/`` holds copies of ``sources`` (finding files) with their folders' ledgers."""
    out = tmp / "run"
    (out / "findings").mkdir(parents=True, exist_ok=True)
    for src in sources:
        shutil.copy2(src, out / "findings" / src.name)
        ledger = src.parent / ".ledger.jsonl"
        if ledger.exists():
            with open(out / "findings" / ".ledger.jsonl", "a") as f:
                f.write(ledger.read_text())
    return out


def rewrite(path: Path, edit: Callable[[dict], None]) -> Path:
    """Edit the finding file in place, as a person would (its record beside it left as it was)."""
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return path


def relabel(engine: str = "trtllm", version: str = "1.2.1") -> Callable[[dict], None]:
    """The three-field relabel: the finding's engine, its fingerprint's engine and engine version."""
    def edit(doc: dict) -> None:
        doc["engine"] = engine
        doc["environment"]["engine"] = engine
        doc["environment"]["engine_version"] = version

    return edit


def with_gpu(doc: dict) -> None:
    """A fingerprint given the GPU its machine did not have (the forger's next field)."""
    doc["environment"]["hardware"]["gpu"] = {"available": True, "devices": [{"name": "NVIDIA H200"}]}
    doc["environment"]["hardware"]["summary"] += " (edited); NVIDIA H200"


def settles_nothing(run: Path, claim_id: str, *reasons: str) -> dict[str, str]:
    """Assert that claim ``claim_id``'s subject answer in run folder ``run`` settles nothing, each of ``reasons`` said:
    in standing, in the written-back blueprint or guide (where the claim is written back), in ``workbench findings``
    and in the report. Returns what each place said, for more checks."""
    found = findings.scan([run / "findings"]).findings
    (state,) = [s for s in standing.claim_states(found) if s.claim.id == claim_id]
    assert not state.resolved, state.headline
    unverified = [s for s in state.subject if s.unverified]
    assert unverified, state.subject
    said = "; ".join(r for s in unverified for r in s.unsettled)
    for r in reasons:
        assert r in said, (r, said)
    assert state.headline.startswith("unresolved — ") and "settles nothing" in state.headline, state.headline
    out = {"standing": said}
    section = claims.get(claim_id).section
    document = (DATA / "blueprint" / "blueprint.md", blueprint.run_writeback) if section not in guide.SECTIONS else (
        DATA / guide.GUIDE, guide.run_writeback)
    if section in (*blueprint.ITEM_SECTIONS, *blueprint.TABLES, *guide.SECTIONS):
        target = run / document[0].name
        assert document[1](document[0], [run / "findings"], "write", target) == 0
        text = target.read_text()
        assert f"{claims.get(claim_id).about.name}: unresolved — " in text and "settles nothing" in text
        assert unverified[0].unsettled[0] in " ".join(text.split()), unverified[0].unsettled[0]
        out["document"] = text
    listed = CliRunner().invoke(app, ["findings", str(run / "findings")])
    assert listed.exit_code == 0, listed.output
    mine = [line for line in listed.stdout.splitlines() if "[settles nothing: " in line]
    assert mine and all(any(r in line for line in mine) for r in reasons), listed.stdout
    out["findings"] = listed.stdout
    page = html.unescape(report.render(run))
    assert all(r in page for r in reasons) and "settles nothing" in page
    out["report"] = page
    return out
