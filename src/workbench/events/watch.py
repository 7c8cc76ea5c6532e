"""``workbench events watch``: a gateway operator's live view of one endpoint's event plane.

It is a consumer like any other (it takes the endpoint's lease), so it shows what a gateway would hold: events/s,
blocks in the inventory, gaps and resyncs, the lease holder, and — for requests the gateway reports into a
JSONL file (``{"tokens": [...], "cached_tokens": n, "salt": optional}`` per line) — the inventory's predicted
reuse beside the engine's reported one. ``--json`` prints one line per refresh instead of the live table.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TextIO

from ..engine import WorkbenchError
from .consumer import Consumer


@dataclass
class RequestFeed:
    """Tails the gateway's request log; each new line becomes a (predicted, reported) row. The watcher predicts
    when it reads the line, after the request was answered: its own stored blocks may already be in the
    inventory, so a gateway's own prediction (made before dispatch) is the stricter figure."""

    path: Path | None
    offset: int = 0
    rows: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        """A log the gateway has not written yet is tailed once it appears; a path that can never be a file is
        refused before anything is read from the endpoint."""
        if self.path is not None and (self.path.is_dir() or not self.path.parent.is_dir()):
            raise WorkbenchError(f"--requests {self.path}: give the gateway's JSONL request log (a file; its folder "
                                 "must exist)")

    def read(self, consumer: Consumer) -> None:
        if self.path is None or not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self.offset)
            for line in f:
                if not line.endswith(b"\n"):
                    break  # a half-written line: read it next time
                self.offset += len(line)
                try:  # a line that is not a request (not UTF-8, not JSON, no tokens) is skipped, as a tail must
                    r = json.loads(line.decode())
                    tokens = [int(t) for t in r["tokens"]]
                except (ValueError, KeyError, TypeError):
                    continue
                self.rows.append({"prompt_tokens": len(tokens), "reported": r.get("cached_tokens"),
                                  "predicted": consumer.inventory.predict(tokens, salt=r.get("salt"))})


def snapshot(consumer: Consumer, feed: RequestFeed, started: float, window: list[tuple[float, int]]) -> dict:
    now = time.monotonic()
    window.append((now, consumer.events))
    while len(window) > 2 and now - window[0][0] > 10:
        window.pop(0)
    (t0, e0), (t1, e1) = window[0], window[-1]
    lease = consumer.lease
    return {
        "endpoint": consumer.source.endpoint, "engine": consumer.source.engine, "uptime_s": round(now - started, 1),
        "events": consumer.events, "events_per_s": round((e1 - e0) / (t1 - t0), 2) if t1 > t0 else 0.0,
        "inventory_blocks": len(consumer.inventory), "gaps": len(consumer.gaps),
        "resyncs": sum(m.kind in ("replayed", "cleared") for m in consumer.timeline),
        "lease": str(lease.holder) if lease else None, "lease_note": lease.note if lease else None,
        "last_marks": [m.detail for m in consumer.timeline if m.kind != "events"][-3:],
        "requests": feed.rows[-8:],
    }


def table(snap: dict) -> Any:
    from rich.table import Table

    t = Table(title=f"KV event plane · {snap['endpoint']} ({snap['engine']})", show_header=False)
    for key in ("lease", "lease_note", "uptime_s", "events", "events_per_s", "inventory_blocks", "gaps", "resyncs"):
        if snap[key] is not None:
            t.add_row(key.replace("_", " "), str(snap[key]))
    for detail in snap["last_marks"]:
        t.add_row("resync", detail)
    for r in snap["requests"]:
        t.add_row("request", f"{r['prompt_tokens']} tokens: predicted {r['predicted']}, reported {r['reported']}")
    return t


def watch(consumer: Consumer, *, duration_s: float | None, interval_s: float, as_json: bool,
          requests: Path | None, out: TextIO, stop: Callable[[], bool] = lambda: False) -> int:
    """Pump and show until ``duration_s`` (None: until interrupted); the number of refreshes."""
    started = time.monotonic()
    feed, window, n = RequestFeed(requests), [], 0

    def step() -> dict:
        consumer.pump(interval_s)
        feed.read(consumer)
        return snapshot(consumer, feed, started, window)

    def done() -> bool:
        return stop() or (duration_s is not None and time.monotonic() - started >= duration_s)

    if as_json:
        while not done():
            out.write(json.dumps(step()) + "\n")
            out.flush()
            n += 1
        return n
    from rich.live import Live

    with Live(table(snapshot(consumer, feed, started, window)), refresh_per_second=4) as live:
        while not done():
            live.update(table(step()))
            n += 1
    return n
