"""The gateway guide (``data/guide/trtllm-gateway.md``) with the event-plane verdicts written back.

The same managed blocks and the same subject/reference rule as the blueprint (:mod:`workbench.blueprint`): each
claim of the *Event plane claims* section gets a block under its list item, whose first line is TensorRT-LLM's
state (unresolved here, with the command that resolves it on a GPU box), then one row per engine that ran."""

from __future__ import annotations

from pathlib import Path

from .. import blueprint

GUIDE = Path("guide") / "trtllm-gateway.md"  # under the data folder
SECTIONS = ("gateway", "shapes")


def run_writeback(guide: Path, finding_dirs: list[Path], mode: blueprint.Mode = "write", out: Path | None = None) -> int:
    """``workbench events guide``: the guide's write-back, as ``workbench writeback`` does the blueprint's."""
    return blueprint.run_writeback(guide, finding_dirs, mode, out, items=SECTIONS, tables=(), document="guide")
