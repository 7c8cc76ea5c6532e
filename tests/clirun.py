"""The ``workbench`` command line run in-process, read as a finished child process is.

A child ``python -m workbench.cli`` spends seconds importing the workbench before it reads its first argument; a
test about what a command says and exits with (not about the process itself: signals, resource limits, a hang)
runs it here instead, through typer's ``CliRunner`` on the same app. The result reads as a
:class:`subprocess.CompletedProcess`: ``returncode``, ``stdout``, ``stderr``; an exception the command let escape is
written to ``stderr`` as the interpreter would have printed it (``Traceback (most recent call last):`` …, exit 1), so
a test's "no traceback" still fails on a crash. The working folder and the environment are the caller's for the
call only: whatever the command sets in ``os.environ`` (``workbench run`` sets ``WORKBENCH_SERVER_LOGS``) is undone.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import traceback
from pathlib import Path
from unittest import mock

from typer.testing import CliRunner


def wb(*args: str, cwd: str | Path | None = None, env: dict[str, str] | None = None,
       drop_env: str | None = None) -> subprocess.CompletedProcess:
    """``workbench ARGS…`` in ``cwd`` with ``env`` added to the environment (after removing every variable whose
    name starts with ``drop_env``, when given)."""
    from workbench.cli import app

    with mock.patch.dict(os.environ), contextlib.chdir(cwd or os.getcwd()):
        if drop_env:
            for key in [k for k in os.environ if k.startswith(drop_env)]:
                del os.environ[key]
        os.environ.update(env or {})
        r = CliRunner().invoke(app, [str(a) for a in args])
    stderr = r.stderr
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        stderr += "".join(traceback.format_exception(r.exception))
    return subprocess.CompletedProcess(list(args), r.exit_code, r.stdout, stderr)
