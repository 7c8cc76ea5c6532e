"""One small registry for everything chosen by name: engines (cells), probes, loop arms.

Entries are lazy ``"module:attr"`` strings, so listing names imports nothing and an engine is
imported only when it is used. Loading checks the entry's type against the registry's base;
registering a name twice with another target is an error; an unknown name gets "did you mean". A registry
may ask each entry to declare its facts at registration (``facts=``: a dataclass with a ``check``), checked
there as pluggy checks a hook implementation against its spec, so a caller asks the registry instead of guessing.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any, Callable, Generic, TypeVar

from .engine import WorkbenchError

T = TypeVar("T")


class UnknownName(WorkbenchError, ValueError):
    """A name no entry has; the message lists the close matches and every valid name."""


class Registry(Generic[T]):
    def __init__(self, kind: str, base: type | None = None, requires: tuple[str, ...] = (),
                 facts: type | None = None, verify: Callable[[str, Any], None] | None = None) -> None:
        """``kind`` names the entries in messages ("engine", "probe"); every entry must be a subclass of ``base``
        (when given) and have the callables named in ``requires`` (for classes that share a Protocol, not a base);
        ``facts``: the type each entry's declared facts must be (its ``check(name, registry)`` raises); ``verify``:
        called with each entry's name and class when it is loaded, raising where its declarations do not hold."""
        self.kind, self.base, self.requires, self.facts_type = kind, base, requires, facts
        self.verify = verify
        self._targets: dict[str, str] = {}
        self._loaded: dict[str, type[T]] = {}
        self._facts: dict[str, Any] = {}

    def register(self, name: str, target: str, facts: Any = None) -> None:
        if ":" not in target:
            raise ValueError(f"{self.kind} {name!r}: target must be 'module:attr', got {target!r}")
        if self._targets.get(name, target) != target:
            raise ValueError(f"{self.kind} {name!r} is already registered as {self._targets[name]}; "
                             f"cannot register it again as {target}")
        if self.facts_type is not None:
            if not isinstance(facts, self.facts_type):
                raise TypeError(f"{self.kind} {name!r}: declare its facts as a {self.facts_type.__name__}, "
                                f"got {facts!r}")
            facts.check(name, self)
        self._targets[name] = target
        self._facts[name] = facts

    def facts(self, name: str) -> Any:
        """The facts ``name`` declared at registration."""
        self.check(name)
        return self._facts[name]

    def add(self, name: str, entry: T) -> None:
        """Register an entry that is already an object (a loop arm's frozen spec): nothing to import later. It
        must be an instance of ``base`` (when given); adding a name twice with another entry is an error."""
        if self.base is not None and not isinstance(entry, self.base):
            raise TypeError(f"{self.kind} {name!r}: {entry!r} is not a {self.base.__name__}")
        if self._loaded.get(name, entry) != entry:
            raise ValueError(f"{self.kind} {name!r} is already registered as {self._loaded[name]!r}")
        self._targets[name] = f"{type(entry).__module__}:{name}"
        self._loaded[name] = entry

    def names(self) -> list[str]:
        return sorted(self._targets)

    def declared(self) -> list[str]:
        """The names in the order they were registered (the loop runs its arms in this order)."""
        return list(self._targets)

    def __contains__(self, name: object) -> bool:
        return name in self._targets

    def check(self, name: str) -> None:
        """Raise :class:`UnknownName` unless ``name`` is registered."""
        if name not in self._targets:
            close = difflib.get_close_matches(name, self._targets, n=3)
            hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
            raise UnknownName(f"unknown {self.kind} {name!r}{hint}; valid {self.kind}s: {', '.join(self.names())}")

    def get(self, name: str) -> type[T]:
        """The registered class, imported on first use and checked against the base (or the added entry)."""
        self.check(name)
        if name not in self._loaded:
            module, _, attr = self._targets[name].partition(":")
            obj = getattr(importlib.import_module(module), attr)
            if self.base is not None and not (isinstance(obj, type) and issubclass(obj, self.base)):
                raise TypeError(f"{self.kind} {name!r} ({self._targets[name]}) is not a {self.base.__name__}")
            missing = [r for r in self.requires if not callable(getattr(obj, r, None))]
            if missing:
                raise TypeError(f"{self.kind} {name!r} ({self._targets[name]}) lacks {', '.join(missing)}")
            if self.verify is not None:
                self.verify(name, obj)
            self._loaded[name] = obj
        return self._loaded[name]
