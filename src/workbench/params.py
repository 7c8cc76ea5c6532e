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


HASH_SEED_MAX = 2**32 - 1


def check_hash_seed(text: str | None, what: str) -> None:
    """PYTHONHASHSEED's own rule: ``random`` or an integer 0 … 4294967295 (``''`` or None: unset). A Python started
    with another value stops before it runs a line (vLLM's engine processes), and vLLM, reading it as text, would
    hash with a seed no Python process can share."""
    if text in (None, "", "random"):
        return
    if not (isinstance(text, str) and text.isascii() and text.isdigit() and int(text) <= HASH_SEED_MAX):
        raise ValueError(f"{what} {text!r} is not a PYTHONHASHSEED: give 'random' or an integer 0 … {HASH_SEED_MAX}")


def leftover(pairs: list[str], extra: list[str]) -> str:
    """Why a command got arguments it takes none of, in words: papermill's two-token ``-p key value`` is spelled
    ``-p key=value`` here, and the words say so with the line to write."""
    bare = [p for p in pairs if "=" not in p]
    said = f"unexpected argument(s) {' '.join(extra)}"
    if not bare:
        return said
    fixed = " ".join(f"-p {k}={v}" for k, v in zip(bare, extra))
    return f"{said}: -p takes one key=value token, not papermill's -p KEY VALUE; write {fixed}"
