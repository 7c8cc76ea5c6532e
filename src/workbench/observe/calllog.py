"""A recording connector's call log: one JSON line per call, appended by whichever process made it.

Both engines' recording connectors (TensorRT-LLM's and vLLM's) run partly in engine worker processes,
so they log to a file rather than to memory; this is that file's one format.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path
from typing import Any

_seq = itertools.count()


def append(path: str | os.PathLike | None, side: str, method: str, **args: Any) -> None:
    """Append one call; without a path there is nowhere to record, and nothing is."""
    if not path:
        return
    entry = {"seq": next(_seq), "pid": os.getpid(), "t": time.time(), "side": side, "method": method, "args": args}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry, default=repr) + "\n")


def read(path: Path) -> list[dict]:
    """Every recorded call, in file order (one process's calls are in call order)."""
    if not path.is_file():
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
