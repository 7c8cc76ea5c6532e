"""Block hashes recomputed from token ids, as an engine's events report them (hash parity).

Each engine's rule lives in its wing (vLLM: :mod:`workbench.cells.vllm.hashing`; TensorRT-LLM:
:mod:`workbench.cells.trtllm.hashing`), and the registry hands out the one an engine declares
(:func:`workbench.cells.event_plane`). Here: what the event plane asks of any of them.
"""

from __future__ import annotations

from typing import Any, Hashable, Protocol, Sequence


class Hasher(Protocol):
    """One engine configuration's block-hash rule: the chain of keys its events carry for a prompt."""

    block_size: int
    scheme: str  # the scheme's name, as a verdict names it

    def chain(self, tokens: Sequence[int], salt: str | None = None, lora: Hashable | None = None) -> list[int]:
        """The key of every block of ``tokens`` the engine stores, root first."""

    def reusable_blocks(self, n_tokens: int) -> int:
        """How many whole blocks of an ``n_tokens`` prompt the engine can reuse."""

    def rekey(self, parent: Any, tokens: Sequence[int]) -> tuple[Any, int]:
        """A block's digest chained onto ``parent``, and the key its events carry."""

    def variants(self) -> tuple:
        """This rule under each other scheme the engine is known to have used (a salt scheme, …)."""
