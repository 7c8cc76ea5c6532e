"""Imported only by :mod:`workbench.isolate`'s forkserver, as its last preload: freeze what the preloads made.

A child forked from the forkserver inherits every object the preloads created (about 700,000 with vLLM). A
full garbage collection in the child walks them all and writes to each one's header, which copies the pages
they share with the forkserver: 0.4 s per collection, and vLLM collects several times per engine start and
stop. Frozen objects (``gc.freeze``, the use the Python docs give it for fork servers) are never walked.

A shared forkserver (:func:`workbench.isolate.shared_forkserver`) also says here that its imports are done, by
creating the file its driver named, so that the driver starts no timed work beside them.
"""

from __future__ import annotations

import gc
import os
import signal

from workbench.isolate import SHARED_READY_ENV  # imported before this module in every forkserver (isolate._modules)

gc.freeze()
signal.signal(signal.SIGINT, signal.default_int_handler)  # as it was before the guard ignored it for the imports

_ready = os.environ.get(SHARED_READY_ENV)
if _ready:
    open(_ready, "w").close()
