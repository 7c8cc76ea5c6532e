"""``GenerationExecutor`` (1.2 line): the reporting half of the executor, as the LLM API sees it.

* ``tensorrt_llm/executor/executor.py``: the KV-event and stats ``IterationResult`` objects are
  created by ``_maybe_initialize_iteration_results`` inside ``generate_async`` (first submit), and
  marked undone on every later submit; ``get_stats`` returns ``[]`` before that, ``get_kv_events``
  asserts.
* ``tensorrt_llm/executor/proxy.py`` ``_start_dispatch_threads`` (and ``submit`` → ``start`` in
  ``tensorrt_llm/executor/worker.py``): the threads that move the engine's events and stats into
  those results start on the first submit; each loop sleeps 0.2 s, then moves everything the
  engine has, one JSON string per event (``json.dumps(KVCacheEventSerializer.serialize(event))``)
  or per iteration.
"""

import json
import threading
from typing import Callable, List, Optional

from .._utils import KVCacheEventSerializer
from .result import IterationResult

DISPATCH_SLEEP_S = 0.2  # time.sleep(0.2) in _iteration_result_task (executor/proxy.py, executor/worker.py)


class GenerationExecutor:
    def __init__(self, latest_kv_events: Callable[[], list], latest_stats: Callable[[], List[dict]]):
        self._latest_kv_events = latest_kv_events  # PyExecutor.get_latest_kv_cache_events (drains)
        self._latest_stats = latest_stats  # PyExecutor.get_latest_iteration_stats (drains)
        self._iter_kv_events_result: Optional[IterationResult] = None
        self._iter_stats_result: Optional[IterationResult] = None
        self._stop = threading.Event()
        self._threads: List[threading.Thread] = []

    def _maybe_initialize_iteration_results(self):
        if self._iter_stats_result is None:
            self._iter_stats_result = IterationResult()
        else:
            self._iter_stats_result.mark_undone()
        if self._iter_kv_events_result is None:
            self._iter_kv_events_result = IterationResult()
        else:
            self._iter_kv_events_result.mark_undone()

    def on_submit(self):
        """What ``generate_async`` → ``submit`` does before the request reaches the engine."""
        self._maybe_initialize_iteration_results()
        if not self._threads:
            self._threads = [
                threading.Thread(target=self._dispatch, daemon=True, name=name,
                                 args=(result, pull, serialize))
                for name, result, pull, serialize in (
                    ("dispatch_kv_cache_events", self._iter_kv_events_result, self._latest_kv_events,
                     lambda e: json.dumps(KVCacheEventSerializer.serialize(e))),
                    ("dispatch_stats", self._iter_stats_result, self._latest_stats, json.dumps))]
            for t in self._threads:
                t.start()

    def _dispatch(self, result: IterationResult, pull: Callable[[], list], serialize: Callable) -> None:
        while not self._stop.wait(DISPATCH_SLEEP_S):
            for item in pull():
                result.queue.put(serialize(item))

    def get_stats(self, timeout: float) -> List[dict]:
        if self._iter_stats_result is None:
            return []  # "Iteration statistics are not available yet" (printed, not raised)
        self._iter_stats_result.set_timeout(timeout)
        return self._iter_stats_result.get_results()

    def get_kv_events(self, timeout: float) -> List[dict]:
        assert self._iter_kv_events_result is not None, "KV Event IterationResult is not properly instantiated."
        self._iter_kv_events_result.set_timeout(timeout)
        return self._iter_kv_events_result.get_results()

    def shutdown(self):
        self._stop.set()
        for t in self._threads:
            t.join()
