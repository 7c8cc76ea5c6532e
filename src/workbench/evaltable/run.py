"""``workbench evaltable``: start each backend's server on loopback (or find it at ``--endpoint``), check AIPerf's
tokenizer against it, run AIPerf once per workload × concurrency × repeat, stop the server, write the table.

Nothing outlives the command: the server is stopped however the run ends (:mod:`workbench.serve`), AIPerf's
process group is ended after each cell and its scratch removed (:mod:`.aiperf`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from .. import cpu, environment, findings, models, progress as _progress, serve
from ..cells.llamacpp._internals import LLAMA_MAX_THREADS
from ..cells.served_id import check_endpoint
from ..engine import WorkbenchError
from . import aiperf, backends, finding, tokenizer
from .backends import Backend, ServerGone
from .table import Row, write

WORKLOADS = {
    "no-prefix": aiperf.Workload("no-prefix"),
    "prefix-1k": aiperf.Workload("prefix-1k", shared_prefix_tokens=1024),
    "multi-turn": aiperf.Workload("multi-turn", turns=3),
}
"""The table's workloads: every prompt its own; all of them after one shared 1K-token system prompt (the
seed's "TTFT (1K prefix)"; the first request of each cell computes it cold, the others find it cached); or
conversations of three turns, each turn sent with the ones before it and their answers."""

Progress = Callable[[str], None]


@dataclass(frozen=True)
class TableRequest:
    """What ``workbench evaltable`` was asked: ``requests`` per cell (default: 2 × concurrency, at least 4);
    ``prefix_tokens`` resizes ``prefix-1k``'s shared prefix (its name stays; the setup records the size)."""

    backends: tuple[str, ...]
    model: str
    concurrency: tuple[int, ...]
    workloads: tuple[str, ...]
    repeats: int
    out: Path
    endpoint: str | None = None
    requests: int | None = None
    prompt_tokens: int = 64
    output_tokens: int = 16
    prefix_tokens: int = 1024
    threads: int = 1
    seed: int = 0
    prefix_caching: bool = True  # False: each server started with its own prefix caching off (the finding's fault)
    ttft_crosscheck: bool = True  # the served cell's TTFT beside AIPerf's on a shared-prefix run's repeats
    findings_dir: Path | None = None  # where the findings go (default: out/findings; a batch: the run's findings)
    slo_ttft_s: float = 2.0  # goodput counts the requests whose TTFT and ITL are at most these
    slo_itl_s: float = 0.1

    def check(self) -> None:
        """Refuse what would fail later, before any server starts (ValueError, one line)."""
        for name in self.backends:
            if name not in backends.ALL:
                raise ValueError(f"unknown backend {name!r}; valid: {', '.join(backends.ALL)}")
        for name in self.workloads:
            if name not in WORKLOADS:
                raise ValueError(f"unknown workload {name!r}; valid: {', '.join(WORKLOADS)}")
        self._check_counts()
        if not self.backends or not self.workloads or not self.concurrency:
            raise ValueError("name at least one --backend, --workload and --concurrency")
        if self.endpoint is not None:
            check_endpoint(self.endpoint)
            if len([b for b in self.backends if b in (*backends.BACKENDS, *backends.AT_ENDPOINT)]) != 1:
                raise ValueError("--endpoint names one server: give exactly one --backend it runs")
            if not self.prefix_caching:
                raise ValueError("--no-prefix-caching starts each server with its own caching off; a server found "
                                 "at --endpoint keeps its own: leave out one of them")
        models.check(self.model)
        hf = [b for b in self.backends if b in backends.BACKENDS and not backends.BACKENDS[b].needs_gguf]
        if hf and models.resolve(self.model).kind in ("default", "gguf"):
            raise ValueError(f"{', '.join(hf)} serves a Hugging Face directory, and {self.model} is a GGUF: give "
                             "--model synthetic:… or a model directory (a table per model)")

    def _check_counts(self) -> None:
        """Every count at least 1, and no more threads than llama.cpp's pool takes."""
        for what, n in [("--concurrency", c) for c in self.concurrency] + [
                ("--repeats", self.repeats), ("--prompt-tokens", self.prompt_tokens),
                ("--output-tokens", self.output_tokens), ("--prefix-tokens", self.prefix_tokens),
                ("--threads", self.threads)] + ([] if self.requests is None else [("--requests", self.requests)]):
            if n < 1:
                raise ValueError(f"{what} must be at least 1, got {n}")
        if len(set(self.concurrency)) < len(self.concurrency):  # each level is a phase of one AIPerf run, named by it
            raise ValueError(f"--concurrency names each level once, got {','.join(map(str, self.concurrency))}")
        for what, x in (("--slo-ttft", self.slo_ttft_s), ("--slo-itl", self.slo_itl_s)):
            if not 0 < x < 3600:
                raise ValueError(f"{what} must be above 0 and below an hour (seconds), got {x}")
        if self.threads > LLAMA_MAX_THREADS:
            raise ValueError(f"--threads must be at most {LLAMA_MAX_THREADS} (llama.cpp's thread pool), got {self.threads}")

    def workload(self, name: str) -> aiperf.Workload:
        w = WORKLOADS[name]
        prefix = self.prefix_tokens if w.shared_prefix_tokens else 0
        return replace(w, shared_prefix_tokens=prefix, prompt_tokens=self.prompt_tokens,
                       output_tokens=self.output_tokens)

    def cell_requests(self, concurrency: int, workload: aiperf.Workload) -> int:
        """``--requests`` (default 2 × concurrency, at least 4), rounded up to whole conversations."""
        n = self.requests or max(4, 2 * concurrency)
        return -(-n // workload.turns) * workload.turns

    @property
    def shares_prefix(self) -> bool:
        """Whether a workload asked for shares a prefix (the prefix-caching finding's evidence)."""
        return any(WORKLOADS[w].shared_prefix_tokens for w in self.workloads)

    @property
    def context_tokens(self) -> int:
        """One slot's context: the shared prefix, the prompt and the output (or a whole conversation's turns), and
        room for the chat template."""
        turns = max(WORKLOADS[w].turns for w in self.workloads)
        return max(self.prefix_tokens, (turns - 1) * (self.prompt_tokens + self.output_tokens)) + \
            self.prompt_tokens + self.output_tokens + 256


@dataclass
class Measured:
    """What a table run has measured so far: its rows and findings, kept when a server stops mid-run."""

    rows: list[Row] = field(default_factory=list)
    findings: list[findings.Finding] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)  # the TTFT cross-checks' words, one per backend (settle nothing)


def run(req: TableRequest, progress: Progress = lambda _: None, done: Measured | None = None
        ) -> tuple[list[Row], Path, Path]:
    """Measure every backend ``req`` names and write the table and the prefix-caching findings (``out/findings``);
    the rows and the table's two files (``done``, where given, holds the findings too). A server that stops mid-run
    is :class:`ServerGone`, raised after what was measured before it (a ``crashed`` row for the cell it stopped
    in) has been written."""
    req.check()
    aiperf.require()
    setup = {"model": req.model, "prompt tokens": req.prompt_tokens, "output tokens": req.output_tokens,
             "shared prefix tokens (prefix-1k)": req.prefix_tokens, "repeats": req.repeats,
             "server threads": req.threads, "prefix caching": "on" if req.prefix_caching else "off (the fault)",
             "goodput SLO": f"TTFT ≤ {req.slo_ttft_s:g} s, ITL ≤ {req.slo_itl_s:g} s",
             "cpu": environment.cpu()["model"], "aiperf": aiperf.AIPERF_VERSION,
             # AIPerf's services load the cores the server computes on where both run here (a lane's one core):
             # its TTFT then carries that load, which the cross-check beside the table shows
             ("AIPerf's cores" if req.endpoint else "cores, the server's and AIPerf's together"): cpu.usable_count()}
    done = Measured() if done is None else done
    try:
        for name in req.backends:
            if name in backends.AT_ENDPOINT and req.endpoint:
                from . import triton

                shares = [(w, bool(WORKLOADS[w].shared_prefix_tokens)) for w in req.workloads]
                done.rows += triton.rows(name, req.endpoint, shares, req.prefix_tokens,
                                         req.cell_requests(1, req.workload("prefix-1k")), req.output_tokens, req.out)
                continue
            reason = backends.unavailable(name)
            if reason:
                done.rows += [Row(name, w, None, "not-run", reason) for w in req.workloads]
                if name in backends.SUBJECT and req.shares_prefix:
                    done.findings.append(finding.not_run(name, reason, setup))
                continue
            try:
                _measure(backends.BACKENDS[name], req, progress, done, setup)
            except tokenizer.TokenizerMismatch as e:  # nothing measured: the backend's rows say why, never a failure
                reason = f"not measured: {e}"
                done.rows += [Row(name, w, None, "not-run", reason) for w in req.workloads]
                if name in backends.SUBJECT and req.shares_prefix:
                    done.findings.append(finding.not_run(name, reason, setup))
    except ServerGone as e:
        measured = sum(r.status == "ok" for r in done.rows)
        if not measured and all(f.verdict == "not-run" for f in done.findings):
            raise  # nothing was measured: no table, no finding
        _, as_md = _keep(done, req, setup)
        raise ServerGone(f"{e}; the {measured} cell(s) measured before it are kept in {as_md}, AIPerf's exports "
                         "beside it; run the table again") from None
    return (done.rows, *_keep(done, req, setup))


def in_batch(engine: str, model: str, findings_dir: str | Path, *, concurrency: str, workloads: str,
             **sizes: int) -> tuple[list[Row], Path, list[findings.Finding]]:
    """The table as a batch notebook runs it (``notebooks/80_evaltable``): ``engine``'s backends, the table in
    the run folder's ``evaltable/ENGINE/`` beside ``findings_dir`` (the run's findings, where the findings go);
    ``concurrency`` and ``workloads`` comma-separated as notebook parameters are. Its rows, Markdown and findings."""
    out = Path(findings_dir).resolve().parent / "evaltable" / engine
    try:
        levels = tuple(int(c) for c in concurrency.split(","))
    except ValueError:
        raise ValueError(f"concurrency takes comma-separated integers, got {concurrency!r}") from None
    req = TableRequest(backends.for_engine(engine), model, levels, tuple(workloads.split(",")), out=out,
                       findings_dir=Path(findings_dir), **sizes)
    done = Measured()
    rows, _, as_md = run(req, done=done)
    return rows, as_md, done.findings


def _keep(done: Measured, req: TableRequest, setup: dict) -> tuple[Path, Path]:
    findings.write_all(done.findings, req.findings_dir or req.out / "findings")
    return write(done.rows, req.out, setup, done.checks)


def _measure(backend: Backend, req: TableRequest, progress: Progress, done: Measured, setup: dict) -> None:
    model = models.resolve(req.model)
    ceiling = None if req.endpoint else models.context_ceiling(model)  # a server found at --endpoint sets its own
    if ceiling is not None and req.context_tokens > ceiling:
        raise ValueError(f"the longest request asked for takes {req.context_tokens} tokens (--prefix-tokens, or a "
                         "multi-turn conversation's earlier turns, + --prompt-tokens + --output-tokens + 256 for the "
                         f"chat template); {req.model} holds {ceiling} (no server was started)")
    with _server(backend, model, req) as (url, gone):
        served, version = backends.identify(backend, url, req.model)
        folder = tokenizer.folder_for(model, backends.model_path(backend, model))
        tokenizer.check(folder, backends.tokenize(backend, url, tokenizer.CHECK_TEXTS), url)
        shared: list[finding.Run] = []  # every shared-prefix run's phases: the finding's evidence
        scraped: list[finding.Reading] = []  # the server's /metrics counters over each of those runs (or why not)
        cells: list[dict] = []  # every phase's throughput, for the finding's figures
        checks: list[str] = []  # the TTFT cross-check's words (settles nothing)
        seed = req.seed
        try:
            for name in req.workloads:
                w = req.workload(name)
                phases: dict[int, list] = {c: [] for c in req.concurrency}
                for k in range(req.repeats):
                    where = f"{name} at concurrency {','.join(map(str, req.concurrency))}, repeat {k + 1} of {req.repeats}"
                    progress(f"{backend.name} {where}")
                    _progress.say(f"AIPerf on {backend.name}: {where}")
                    cell = aiperf.Cell(url, served, folder, w, tuple((c, req.cell_requests(c, w)) for c in req.concurrency),
                                       seed, (req.slo_ttft_s, req.slo_itl_s))
                    seed += 1  # each run its own prompts: a repeat must not find the last one's prompts cached
                    out = req.out / "aiperf" / backend.name / name / f"r{k + 1}"
                    before = backends.counters(backend, url) if w.shared_prefix_tokens else ""
                    try:
                        got = _cell(cell, out, lambda w=where: gone(w), where)
                    except ServerGone as e:
                        done.rows += [Row(backend.name, name, c, "crashed", str(e)) for c in req.concurrency]
                        raise
                    for c, export in got:
                        phases[c].append(export)
                        cells.append(finding.cell_row(name, c, export))
                    if w.shared_prefix_tokens:
                        shared.append(got)
                        read = backends.rise(before, backends.counters(backend, url))
                        scraped.append(f"{where}: {read}" if isinstance(read, str) else read)
                        if req.ttft_crosscheck and not checks:
                            checks.append(_crosscheck(backend, req, url, got[0]))
                done.rows += [Row.measured(backend.name, name, c, phases[c], req.out, first=i == 0)
                              for i, c in enumerate(req.concurrency)]
        finally:  # the shared-prefix runs that completed are evidence, whether or not the server outlived the rest
            if shared:
                on = finding.Served(backend.name, version, req.prefix_caching, req.prefix_tokens, backend.same_counter)
                done.findings.append(finding.finding(on, shared, model, setup, scraped, cells, checks))
                done.checks += checks


def _crosscheck(backend: Backend, req: TableRequest, url: str, phase: tuple[int, Any]) -> str:
    """The TTFT cross-check on a run's first phase (:mod:`.crosscheck`), in words; a failure is said, never
    raised: the check settles nothing."""
    from . import crosscheck

    c, export = phase
    try:
        check = crosscheck.ttft(backend.name, req.model, url, export.folder, req.out, c, export.requests)
    except (WorkbenchError, ValueError) as e:  # the cell's errors (a refused request, a prompt too long) and ids'
        return f"TTFT cross-check not made (workbench-timed, settles nothing): {str(e).splitlines()[0]}"
    return check.words() if check else "TTFT cross-check not made: the run's first phase had no repeat"


def _cell(cell: aiperf.Cell, out: Path, gone: Callable[[], str | None], where: str) -> list[tuple[int, Any]]:
    """Each phase of ``cell``'s run, ``(concurrency, export)``, in the order they ran."""
    from .exports import read

    try:
        aiperf.run(cell, out, server_gone=gone)
    except aiperf.ServerStopped as e:
        raise ServerGone(str(e)) from None
    got = [(c, read(out, f"c{c}")) for c, _ in cell.levels]
    for (c, export), (_, asked) in zip(got, cell.levels):
        if export.errors or export.completed < asked:
            reason = gone()
            if reason:
                raise ServerGone(reason)
            raise WorkbenchError(f"{export.errors} of {asked} requests failed on {where} (concurrency {c}) against "
                                 f"{cell.url} (AIPerf completed {export.completed}); see {out / 'aiperf.log'}")
    return got


class _server:
    """The server to measure, as ``(url, gone)``: started on loopback and stopped on exit, or found at
    ``req.endpoint``. ``gone(where)`` is why it can no longer be measured (it stopped), else None."""

    def __init__(self, backend: Backend, model: models.ResolvedModel, req: TableRequest) -> None:
        self.backend, self.model, self.req, self.server = backend, model, req, None

    def __enter__(self) -> tuple[str, Callable[[str], str | None]]:
        if self.req.endpoint:
            return self.req.endpoint.rstrip("/"), self._gone_endpoint
        path, slots = backends.model_path(self.backend, self.model), max(self.req.concurrency)
        request = serve.ServerRequest(self.backend.name, str(path), threads=self.req.threads, slots=slots,
                                      context_tokens=self.req.context_tokens,
                                      extra_args=() if self.req.prefix_caching else self.backend.cache_off,
                                      options=self.backend.options(path, self.req.context_tokens, slots))
        self.server = serve.start(request, self.req.out / "servers", build=self.backend.launch)
        return self.server.url, self._gone_started

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.stop()

    def _gone_started(self, where: str) -> str | None:
        dead = self.server.died(f"{where} against {self.server.url}")
        if dead is None:
            return None
        last = f"; its log ends {dead.log_tail[-1].strip()[:160]!r}" if dead.log_tail else ""
        return f"{self.backend.label}: {dead.headline()}{last}"

    def _gone_endpoint(self, where: str) -> str | None:
        url = self.req.endpoint.rstrip("/")
        if backends.answering(url):
            return None
        return (f"nothing answers at {url} any more: {self.backend.label} stopped during {where}; start it there "
                f"({self.backend.start_hint(self.req.model, url)}) and run the table again")

