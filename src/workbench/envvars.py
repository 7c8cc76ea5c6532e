"""Environment variables changed for a span and put back after it, for what reads them at start: a notebook's
kernel, a forkserver, an engine. The one place the workbench sets and restores them."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Mapping, Sequence

#: The running notebook's path, which jupyter_server gives the kernel it starts (and the runner its batch kernels):
#: what a notebook's relative links resolve against.
NOTEBOOK = "JPY_SESSION_NAME"


@contextlib.contextmanager
def scoped(set: Mapping[str, str] | None = None, *, default: Mapping[str, str] | None = None,
           drop: Sequence[str] = ()) -> Iterator[None]:
    """For the span: ``drop`` removed, then ``default`` set where the user has not set it, then ``set`` set
    whatever was there; afterwards every variable named is as it was before, absent ones absent again."""
    set, default = dict(set or {}), dict(default or {})
    saved = {k: os.environ.get(k) for k in (*drop, *default, *set)}
    try:
        for k in drop:
            os.environ.pop(k, None)
        for k, v in default.items():
            os.environ.setdefault(k, v)
        os.environ.update(set)
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
