"""Issue 39 item 6, its TTFT half: AIPerf's TTFT beside the workbench's own served cell's, on the same requests.

After a shared-prefix run, the backend's served cell (:mod:`workbench.cells.served`, attached at the server's URL)
sends the run's repeats again, one at a time: each request's chat messages as AIPerf sent them
(``inputs.json``), rendered by the server's own chat template into token ids, the shared part warmed first under
a salt of the cell's own (so the request finds its shared prefix cached and the rest of its prompt new, as it
did under AIPerf; the salt keeps it from reading AIPerf's copy of the whole prompt), then decoded for one token.

What each times: AIPerf, from sending ``POST /v1/chat/completions`` on a new connection (the table's
``--connection-reuse-strategy never``) with text that the server templates and tokenizes, to the first streamed
chunk with content; the cell, from sending token ids on its pooled connection to the first streamed token. Both
include the same prefill of the request's own tokens after its cached prefix. They agree when their ranges
(least–greatest) overlap; otherwise the difference is stated with what each includes, and the load that differs
(AIPerf's own services run beside the server during its requests; on two shared cores, 2026-12-07, that made its
TTFT ~3× the cell's on llama-server, 1.54 s against 0.46 s). Both are timings: the check is labelled
workbench-timed and settles nothing.
"""

from __future__ import annotations

import json
import statistics
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from ..engine import WorkbenchError
from .exports import Request

INPUTS = "inputs.json"  # AIPerf's export of every request body it sent, by conversation


@dataclass(frozen=True)
class TtftCheck:
    """AIPerf's TTFT of a run's repeats beside the served cell's on the same requests (seconds, in send order)."""

    backend: str
    run: str  # the AIPerf run's folder, relative to the table
    concurrency: int
    aiperf_s: tuple[float, ...]
    cell_s: tuple[float, ...]
    connect_s: tuple[float, ...]  # AIPerf's connection setup inside each of its TTFTs (http_req_connecting)

    @property
    def agree(self) -> bool:
        """The two ranges overlap."""
        return max(self.aiperf_s) >= min(self.cell_s) and max(self.cell_s) >= min(self.aiperf_s)

    def words(self) -> str:
        a, c = statistics.median(self.aiperf_s), statistics.median(self.cell_s)
        said = (f"TTFT cross-check on {len(self.cell_s)} repeats of {self.run} (workbench-timed, settles nothing): "
                f"AIPerf median {a * 1e3:.0f} ms [{min(self.aiperf_s) * 1e3:.0f}–{max(self.aiperf_s) * 1e3:.0f}], "
                f"the served cell {c * 1e3:.0f} ms [{min(self.cell_s) * 1e3:.0f}–{max(self.cell_s) * 1e3:.0f}]")
        if self.agree:
            return said + ": they agree within their spread"
        return (said + f": they differ by {abs(a - c) * 1e3:.0f} ms ({'AIPerf' if a > c else 'the cell'} slower); "
                f"AIPerf's includes a new connection (median {statistics.median(self.connect_s) * 1e3:.1f} ms) and "
                "the server's chat template and tokenizing, the cell's neither, and the prefill they share is the "
                "same; what those leave unexplained is load: AIPerf's services share the CPU with the server while "
                "it sends, the cell sends after they have exited")

    def as_json(self) -> dict[str, Any]:
        return asdict(self) | {"agree": self.agree, "words": self.words()}


def _payloads(folder: Path) -> dict[str, list[dict]]:
    """Each conversation's chat messages, as AIPerf sent them (its ``inputs.json``)."""
    try:
        doc = json.loads((folder / INPUTS).read_text())
        return {s["session_id"]: s["payloads"][0]["messages"] for s in doc["data"]}
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        raise WorkbenchError(f"cannot read the requests AIPerf sent from {folder / INPUTS} (AIPerf 0.13's "
                             f"data[].session_id, payloads[0].messages): {type(e).__name__}: {e}") from None


def _common(seqs: Sequence[Sequence[int]]) -> int:
    n = min(len(s) for s in seqs)
    for i in range(n):
        if len({s[i] for s in seqs}) > 1:
            return i
    return n


def ttft(backend: str, model: str, url: str, folder: Path, root: Path, concurrency: int,
         requests: Sequence[Request]) -> TtftCheck | None:
    """The served cell's TTFT on ``requests``' repeats (those after the first ``concurrency``) of the AIPerf run
    in ``folder``; None where the run had no repeat."""
    from ..cells import cell_class

    repeats = list(requests[concurrency:])
    if not repeats:
        return None
    messages = _payloads(folder)
    unknown = sorted({r.conversation for r in requests} - messages.keys(), key=str)
    if unknown:  # said as the table's other cross-check failures are (run._crosscheck), never raised
        raise ValueError(f"AIPerf's records name conversation(s) {', '.join(map(str, unknown[:3]))} that its "
                         f"inputs.json in {folder} lacks")
    # the class's own open, not open_cell: attached to the server, its engine is not imported into this process
    with cell_class(backend).open(model, endpoint=url, slots=1) as cell:
        ids = {r.conversation: cell._tokens_of(messages[r.conversation]) for r in requests}
        shared = _common(list(ids.values()))
        salt = f"ttft-crosscheck-{uuid.uuid4().hex[:8]}"  # nothing AIPerf sent is cached under it
        cell_s = []
        for r in repeats:
            cell.ensure_prefix(ids[r.conversation][:shared], salt=salt)
            cell.prefill_suffix(ids[r.conversation][shared:], defer=True)
            cell_s.append(cell.decode(max_tokens=1).ttft_s)
    return TtftCheck(backend, str(folder.relative_to(root)), concurrency, tuple(r.ttft_s for r in repeats),
                     tuple(cell_s), tuple(r.connect_s or 0.0 for r in repeats))
