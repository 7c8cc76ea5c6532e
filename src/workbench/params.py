"""Reading parameter values that arrive as text (``-p``, ``-c``, papermill) as the types they declare."""

from __future__ import annotations

TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})


def parse_bool(text: str) -> bool:
    """``"false"`` must not be truthy; anything but the usual spellings is a :class:`ValueError`."""
    v = text.strip().lower()
    if v in TRUE:
        return True
    if v in FALSE:
        return False
    raise ValueError(f"expected true or false, got {text!r}")
