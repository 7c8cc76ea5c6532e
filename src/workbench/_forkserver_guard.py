"""Imported only by :mod:`workbench.isolate`'s forkserver (as its first preload): it dies with its parent.

multiprocessing's forkserver ends when its parent's end of a pipe closes, but it hands that end to every
child it forks, so a child that outlives the parent (an engine being torn down) keeps it alive. A parent-death
signal (Linux ``PR_SET_PDEATHSIG``) ends it the moment the parent does; its children end by isolate's own
watch. The signal follows the thread that started the forkserver, which is the caller's main thread here.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1

_log = os.environ.get("WORKBENCH_FORKSERVER_LOG")  # isolate.SHARED_LOG_ENV: a shared forkserver's imports print
if _log:
    _fd = os.open(_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(_fd, 1)
    os.dup2(_fd, 2)
    os.close(_fd)

# a Ctrl-C at the terminal reaches this process too (it is in the command's process group): while it imports, it
# would print a KeyboardInterrupt traceback over the console; its caller ends it. multiprocessing ignores SIGINT here
# once the imports are done; _forkserver_frozen (the last preload) puts it back first, for the children it forks
signal.signal(signal.SIGINT, signal.SIG_IGN)

if sys.platform.startswith("linux"):
    _parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != _parent:  # the parent died before the signal was armed
        os._exit(1)
