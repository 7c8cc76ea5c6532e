"""Engine registry: cells are registered by name and imported only when opened.

``import workbench`` never imports an engine; ``open_cell("llamacpp", …)`` imports llama_cpp,
``open_cell("trtllm", …)`` imports tensorrt_llm and ``open_cell("vllm", …)`` imports vllm (or
raises EngineUnavailable with the reason). The served engines (``llamacpp-server``, ``vllm-server``,
``trtllm-serve``) start a server process and talk HTTP to it, or attach to one (``endpoint=URL``).

Each engine lives in its wing (``cells/<engine>/``) and declares its facts here, once, as it is registered
(:class:`EngineFacts`): callers ask :func:`options_class`, :func:`takes`, :func:`runs` and :func:`event_plane`
rather than guess an engine from its name or its description's keys.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import types
import typing
from dataclasses import dataclass, field, fields
from typing import Any, Iterable, Mapping

from ..engine import Cell, EngineUnavailable, observer_mismatches
from ..registry import Registry


GGUF_KINDS = ("default", "gguf", "synthetic")
HF_KINDS = ("hf", "synthetic")


@dataclass(frozen=True)
class EngineFacts:
    """What a caller asks about an engine without opening it, declared once where the engine is registered and
    checked there (:meth:`check`), as pluggy checks a hook implementation against its spec. Targets stay
    ``"module:attr"`` strings, so registering imports nothing; each is checked again when first loaded."""

    options: str  # "module:Class": the options dataclass its open() takes
    runs: str | None = None  # a served engine: the in-process engine its server runs
    events: str | None = None  # a module answering workbench.events.plane.EventPlane; None: no stream reproduced
    # the endpoint forms `workbench events watch` consumes this engine's stream at ("http://HOST:PORT"), by scheme
    watched_at: tuple[str, ...] = ()
    # the model kinds it runs (workbench.models.kind): a GGUF file (the default model is one) or a Hugging Face
    # directory; a synthetic spec is both
    model_kinds: tuple[str, ...] = GGUF_KINDS
    # "module:Class": its modeld contract session adapter (workbench.transport.session.CellSession), which
    # `workbench cell serve` serves on modeld's wire; None: it is not served as a cell
    session: str | None = None

    def check(self, name: str, registry: Registry) -> None:
        taken = {_scheme(f) for other in registry.names() for f in registry.facts(other).watched_at}
        rules = (
            (not self.watched_at or self.events is not None, "watched_at needs an event plane (events=)"),
            (all("://" in f for f in self.watched_at), f"watched_at must be 'scheme://…' forms, got {self.watched_at!r}"),
            (not taken & {_scheme(f) for f in self.watched_at},
             f"watched_at {self.watched_at!r}: another engine declares one of these schemes"),
            (bool(self.model_kinds) and set(self.model_kinds) <= {*GGUF_KINDS, *HF_KINDS},
             f"model_kinds must name some of {', '.join(dict.fromkeys(GGUF_KINDS + HF_KINDS))}, got {self.model_kinds!r}"),
            (self.options.count(":") == 1, f"options must be 'module:Class', got {self.options!r}"),
            (self.session is None or (self.session.count(":") == 1 and self.runs is None),
             f"session must be 'module:Class' of an in-process engine, got {self.session!r}"),
            (self.events is None or ":" not in self.events, f"events must name a module, got {self.events!r}"),
            (self.runs is None or (self.runs != name and self.runs in registry
                                   and registry.facts(self.runs).runs is None),
             f"runs must name an in-process engine registered before it, got {self.runs!r}"),
        )
        if problems := [why for ok, why in rules if not ok]:
            raise ValueError(f"engine {name!r}: {'; '.join(problems)}")


def _scheme(form: str) -> str:
    return form.partition("://")[0]


ENGINES: Registry = Registry("engine", requires=("open", "availability"), facts=EngineFacts)
SERVED: dict[str, str] = {}
"""Each served engine and the in-process engine its server runs (its facts' ``runs``), filled as they register."""


def register(name: str, target: str, facts: EngineFacts) -> None:
    """Register an engine as ``"module:Class"`` with its facts; resolved lazily on first use."""
    ENGINES.register(name, target, facts)
    if facts.runs is not None:
        SERVED[name] = facts.runs


register("llamacpp", "workbench.cells.llamacpp:LlamaCppCell",
         EngineFacts("workbench.cells.llamacpp:LlamaCppOptions", session="workbench.cells.llamacpp.session:LlamaSession"))
register("trtllm", "workbench.cells.trtllm.cell:TrtLlmCell",
         EngineFacts("workbench.cells.trtllm.cell:TrtLlmOptions", events="workbench.cells.trtllm.plane",
                     model_kinds=HF_KINDS, session="workbench.cells.trtllm.session:TrtllmSession"))
register("vllm", "workbench.cells.vllm.cell:VllmCell",
         EngineFacts("workbench.cells.vllm.cell:VllmOptions", events="workbench.cells.vllm.plane", model_kinds=HF_KINDS,
                     session="workbench.cells.vllm.session:VllmSession"))
# Served engines: the same contract over each server's HTTP API (each wing's served.py, workbench.serve).
register("llamacpp-server", "workbench.cells.llamacpp.served:LlamaServerCell",
         EngineFacts("workbench.cells.llamacpp.served:LlamaServerOptions", runs="llamacpp"))
register("vllm-server", "workbench.cells.vllm.served:VllmServerCell",
         EngineFacts("workbench.cells.vllm.served:VllmServeOptions", runs="vllm", events="workbench.cells.vllm.plane",
                     watched_at=("ipc://PATH", "tcp://HOST:PORT"), model_kinds=HF_KINDS))
register("trtllm-serve", "workbench.cells.trtllm.served:TrtllmServeCell",
         EngineFacts("workbench.cells.trtllm.served:TrtllmServeOptions", runs="trtllm",
                     events="workbench.cells.trtllm.plane", watched_at=("http://HOST:PORT", "https://HOST:PORT"),
                     model_kinds=HF_KINDS))


def runs(engine: str) -> str:
    """The engine that does the work behind ``engine``: a served engine's in-process twin, else ``engine`` itself
    (a claim about TensorRT-LLM is answered by ``trtllm`` and ``trtllm-serve`` alike)."""
    return SERVED.get(engine, engine)


@dataclass(frozen=True)
class Availability:
    engine: str
    available: bool
    version: str | None
    reason: str | None = None
    details: dict = field(default_factory=dict)


def known_options(cls: type, engine: str, options: Mapping[str, Any]) -> dict:
    """``options`` as a dict, refused with the valid names when one is not a field of the options dataclass ``cls``."""
    names = {f.name for f in fields(cls)}
    if unknown := sorted(set(options) - names):
        raise TypeError(f"unknown {engine} cell option(s) {', '.join(unknown)}; valid: {', '.join(sorted(names))}")
    return dict(options)


def check_model(engine: str, spec: str) -> None:
    """Refuse a model spec ``engine`` cannot run (its facts' ``model_kinds``): a GGUF file for an engine that runs
    Hugging Face directories, or the other way round (:class:`~workbench.models.ModelSpecError`, one line)."""
    from .. import models

    kind = models.kind(spec)
    if kind not in ENGINES.facts(engine).model_kinds:
        if kind in GGUF_KINDS:
            raise models.ModelSpecError(f"{engine} runs a Hugging Face directory (config.json + safetensors), and "
                                        f"{spec} is a GGUF file: give a 'synthetic:…' spec or a model directory")
        raise models.ModelSpecError(f"{engine} runs a GGUF file, and {spec} is a Hugging Face directory: give a "
                                    "'synthetic:…' spec or a .gguf file")


def check_options(engine: str, options: Mapping[str, Any]) -> None:
    """Refuse, before anything runs, cell options ``engine``'s options class would refuse when a cell opens: an
    unknown name (:func:`known_options`), a value of another type than the field declares (``threads: "abc"``),
    or one its own checks refuse (``__post_init__``: ``block_size: 33``). TypeError or ValueError, one line."""
    from ..engine import WorkbenchError

    cls = options_class(engine)
    values = known_options(cls, engine, options)
    hints = _hints(cls)
    try:  # as an engine's from_options takes them: a list where a tuple is declared
        built = cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})
    except (TypeError, ValueError, WorkbenchError) as e:
        raise (TypeError if _mistyped(engine, hints, values) else ValueError)(
            _mistyped(engine, hints, values) or f"{engine} cell options: {e}") from None
    wrong = _mistyped(engine, hints, {k: getattr(built, k) for k in values})  # after the class's own conversions
    if wrong:
        raise TypeError(wrong)


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve is not checked
        return {}


def _mistyped(engine: str, hints: Mapping[str, Any], values: Mapping[str, Any]) -> str | None:
    """The first value that is not of its field's declared type, in words (None: every one is)."""
    for name, value in values.items():
        tp = hints.get(name)
        if tp is not None and not _fits(tp, value):
            return f"{engine} cell option {name} must be {_words(tp)}, got {value!r}"
    return None


def _fits(tp: Any, value: Any) -> bool:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(a, value) for a in args)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if origin is tuple or tp is tuple:
        item = args[0] if len(args) == 2 and args[1] is Ellipsis else None
        return isinstance(value, (list, tuple)) and (item is None or all(_fits(item, v) for v in value))
    if origin is not None and isinstance(origin, type) and issubclass(origin, Mapping):
        return isinstance(value, Mapping)
    return True  # Any, or a type this check does not read


def _words(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_words(a) for a in args)
    if tp is type(None):
        return "null"
    if origin is tuple or tp is tuple:
        return "a list" + (f" of {_words(args[0])}" if args and args[0] is not Ellipsis else "")
    if origin is not None and isinstance(origin, type) and issubclass(origin, Mapping):
        return "a mapping"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(tp, str(tp))


def engines(*, served: bool = True) -> list[str]:
    """Every registered engine; ``served=False``: the in-process ones only (a report's empty panels)."""
    return [e for e in ENGINES.names() if served or e not in SERVED]


def cell_class(engine: str) -> Any:
    return ENGINES.get(engine)


@functools.cache
def options_class(engine: str) -> type:
    """The options dataclass ``engine`` declared, imported on first use and checked to be one."""
    module, _, attr = ENGINES.facts(engine).options.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"engine {engine!r} declares options {module}:{attr}, which is not a dataclass")
    return cls


def takes(engine: str, options: Iterable[str]) -> bool:
    """Whether ``engine``'s options dataclass has every one of ``options``."""
    return set(options) <= {f.name for f in fields(options_class(engine))}


@functools.cache
def event_plane(engine: str) -> Any:
    """The module answering :class:`workbench.events.plane.EventPlane` for ``engine``, None where it declared no
    stream; checked on first use: each call with the parameters the spec names."""
    from ..events.plane import HOOKS, EventPlane

    where = ENGINES.facts(engine).events
    if where is None:
        return None
    plane = importlib.import_module(where)
    for hook in HOOKS:
        want = list(inspect.signature(getattr(EventPlane, hook)).parameters)[1:]
        impl = getattr(plane, hook, None)
        got = list(inspect.signature(impl).parameters) if callable(impl) else None
        if got != want:
            raise TypeError(f"engine {engine!r}'s event plane {where} answers {hook}"
                            f"({', '.join(got) if got is not None else 'nothing'}), the spec asks {hook}({', '.join(want)})")
    return plane


def served_as_cell() -> list[str]:
    """The engines ``workbench cell serve`` serves on modeld's wire (those that declared a session adapter)."""
    return [e for e in ENGINES.names() if ENGINES.facts(e).session is not None]


@functools.cache
def session_class(engine: str) -> type:
    """The contract session adapter ``engine`` declared (``EngineFacts.session``), imported on first use and checked
    to be a :class:`workbench.transport.session.CellSession`; a ValueError naming the engines that have one."""
    from ..transport.session import CellSession

    ENGINES.check(engine)
    where = ENGINES.facts(engine).session
    if where is None:
        raise ValueError(f"engine {engine!r} is not served as a cell; cell engines: {', '.join(served_as_cell())}")
    module, _, attr = where.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, CellSession)):
        raise TypeError(f"engine {engine!r} declares session {where}, which is no CellSession")
    return cls


def watched_at(endpoint: str) -> str | None:
    """The engine whose event stream ``workbench events watch`` consumes at ``endpoint``, by its scheme (the forms
    each engine declared in its facts), None where no engine declares that form."""
    scheme = _scheme(endpoint) if "://" in endpoint else None
    return next((e for e in ENGINES.names() if scheme in {_scheme(f) for f in ENGINES.facts(e).watched_at}), None)


def watch_forms() -> str:
    """Every endpoint form ``events watch`` takes, by engine, for a message ("trtllm-serve's (http://HOST:PORT …)")."""
    return " or ".join(f"{e}'s ({' or '.join(ENGINES.facts(e).watched_at)})" for e in ENGINES.names()
                       if ENGINES.facts(e).watched_at)


def preload(engine: str) -> tuple[str, ...]:
    """The modules a child working ``engine`` imports anyway (its cell's module and the cell's ``preload``), for
    :func:`workbench.isolate.call`; none for an engine whose cell cannot be imported here."""
    try:
        cls = cell_class(engine)
    except Exception:  # noqa: BLE001 - an unknown or broken engine is reported by the call itself
        return ()
    return (cls.__module__, *getattr(cls, "preload", ()))


def availability(engine: str) -> Availability:
    """Whether ``engine`` can run here, without opening a model. Never raises for a known engine."""
    return cell_class(engine).availability()


def open_cell(engine: str, model: str, **options: Any) -> Cell:
    """Open a context-managed cell of ``engine`` on ``model`` (a spec for :func:`workbench.models.resolve`)."""
    cls = cell_class(engine)
    avail = cls.availability()
    if not avail.available:
        raise EngineUnavailable(engine, avail.reason or "unknown reason")
    cell = cls.open(model, **options)
    try:
        _check_observers(engine, cls, cell)
    except BaseException:
        cell.close()
        raise
    return cell


_CHECKED: set[tuple[type, tuple[str, ...]]] = set()  # (cell class, observers it announced) already checked


def _check_observers(engine: str, cls: type, cell: Cell) -> None:
    """Check the observers a cell announces against their Protocols once per class and announced set (as pluggy
    checks a hook implementation at ``register()``), so a drifted method fails at open, not inside a probe."""
    announced = tuple(cell.describe().observers)
    if (cls, announced) in _CHECKED:
        return
    problems = observer_mismatches(cell, announced)
    if problems:
        raise TypeError(f"the {engine} cell ({cls.__qualname__}) announces observers it does not implement as "
                        f"declared in workbench.engine: {'; '.join(problems)}")
    _CHECKED.add((cls, announced))


__all__ = ["SERVED", "Availability", "EngineFacts", "availability", "cell_class", "event_plane", "known_options",
           "engines", "open_cell", "options_class", "register", "runs", "served_as_cell", "session_class", "takes",
           "watch_forms", "watched_at"]
