"""What a long experiment is doing now, in one line, for ``workbench run``'s progress bar.

A notebook runs in a kernel of its own (and its experiments in children of that kernel), so the batch's progress
bar saw only which notebook ran: the agentic loop's two minutes showed nothing inside. Where ``workbench run`` names
a file in :data:`ENV` (one per notebook job, beside its log), an experiment says what it is at with :func:`say` (a
probe as it starts, the loop at each turn, the eval table at each AIPerf run); the bar reads it back
(:func:`read`). Outside a batch :func:`say` does nothing; it never raises (a progress line is never worth a
failed experiment).
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "WORKBENCH_PROGRESS"
SUFFIX = ".progress"  # beside the job's log: logs/<engine>/<notebook>.log.progress


def say(text: str) -> None:
    """Replace the line the running job's progress file holds with ``text`` (nothing outside ``workbench run``)."""
    path = os.environ.get(ENV)
    if not path:
        return
    try:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(" ".join(text.split())[:200])
        os.replace(tmp, path)
    except OSError:
        pass


def read(path: str | os.PathLike) -> str | None:
    """The line a progress file holds, or None (none written yet, or gone)."""
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").strip() or None
    except OSError:
        return None


def path_for(log: str | os.PathLike) -> Path:
    """The progress file of the job whose log is ``log``."""
    return Path(f"{log}{SUFFIX}")
