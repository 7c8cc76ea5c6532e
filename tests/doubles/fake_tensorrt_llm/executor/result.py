"""``tensorrt_llm/executor/result.py`` (1.2 and 1.4 lines): completion outputs, request results, iteration results.

1.4 (``_profile.V14``): the request's result carries ``cached_tokens``, the exact number of prompt tokens the
engine found cached (ai-dynamo/dynamo#13567 switched to it from ``num_reused_blocks × block_size`` on 1.3.0rc23:
0 → 400 in-process); 1.2 has no such attribute.
"""

import json
from dataclasses import dataclass, field
from queue import Empty, Queue
from typing import List, Optional

from .. import _profile


@dataclass(slots=True)
class CompletionOutput:
    index: int
    text: str = ""
    token_ids: List[int] = field(default_factory=list)
    finish_reason: Optional[str] = None
    request_perf_metrics: object = None
    _last_text_len: int = 0
    _last_token_ids_len: int = 0

    @property
    def text_diff(self) -> str:
        return self.text[self._last_text_len:]

    @property
    def token_ids_diff(self) -> List[int]:
        return self.token_ids[self._last_token_ids_len:]


class GenerationResult:
    """A request's future: iterate for streaming steps, ``result()`` to wait for the end."""

    def __init__(self, request_id: int, prompt_token_ids: List[int], steps: List[CompletionOutput],
                 prepopulated: int = 0):
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self._steps = steps
        self._at = -1
        self._cached_tokens = prepopulated  # the engine's prepopulatedPromptLen

    @property
    def finished(self) -> bool:
        return self._at == len(self._steps) - 1

    @property
    def outputs(self) -> List[CompletionOutput]:
        return [self._steps[self._at]]

    def result(self, timeout=None) -> "GenerationResult":
        self._at = len(self._steps) - 1
        return self

    def __iter__(self):
        return self

    if _profile.V14:
        @property
        def cached_tokens(self) -> int:
            return self._cached_tokens

    def __next__(self) -> "GenerationResult":
        if self.finished:
            raise StopIteration
        self._at += 1
        return self


class IterationResult:
    """Stats or KV events of every iteration, fed by a dispatch thread as JSON strings.

    As in 1.2's ``IterationResult``: ``get_results`` reads until one ``queue.get(timeout)`` runs
    dry, ``json.loads`` each entry, and then returns ``[]`` until ``mark_undone`` (called on the
    next submit) — entries that arrive after a dry read wait for the next request.
    """

    def __init__(self):
        self._done = False
        self._timeout = 2
        self.queue: Queue = Queue()

    def set_timeout(self, timeout: float):
        self._timeout = timeout

    def mark_undone(self):
        self._done = False

    def get_results(self) -> List[dict]:
        results = []
        while not self._done:
            try:
                results.append(json.loads(self.queue.get(timeout=self._timeout)))
            except Empty:
                self._done = True
        return results
