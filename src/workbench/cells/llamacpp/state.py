"""A sequence's state blob as llama.cpp writes it: the one reader of ``llama_state_seq_get_data``'s layout.

The layout (ggml-org/llama.cpp src/llama-context.cpp ``state_seq_write_data``; src/llama-kv-cache.cpp
``llama_kv_cache::state_write``, ``state_write_meta``, ``state_write_data``): u32 io magic, i32 seq id, u32 stream
count; per stream u32 cell count and, when it is not 0, per cell i32 pos, u32 seq-id count, those i32 ids; then
u32 v_trans, u32 n_layer; per layer i32 K type, u64 K row size and cells × that many bytes; then per layer with a
V tensor either i32 V type, u64 V row size and its rows, or (V transposed) i32 V type, u32 element size,
u32 n_embd_v_gqa and cells × n_embd_v_gqa elements. A sequence lives in one stream (the one stream of a
unified cache, or its own of a cache split per sequence; the others write a cell count of 0). The walk
must end exactly at the blob's end; any other layout is an error, never a guess.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ...engine import WorkbenchError

STATE_IO_MAGIC = 0xAF143CD8  # src/llama-context.cpp: io_magic, first word of a sequence state blob
STATE_SEQ_MAGIC, STATE_SEQ_VERSION = 0x67677371, 3  # include/llama.h: LLAMA_STATE_SEQ_MAGIC ('ggsq'), _VERSION
CELL_META_BYTES = 12  # per cell of a sequence's own: i32 pos, u32 seq-id count (1), that i32 id (state_write_meta)


@dataclass(frozen=True)
class SeqState:
    """What a sequence's state blob says of its KV, read from the engine's own bytes."""

    positions: tuple[int, ...]  # the position of each KV cell the sequence holds, in the blob's order
    shared: bool  # some cell also belongs to another sequence (its seq-id count is not 1)
    row_bytes: int | None  # K+V bytes per cell over all layers; None when the sequence holds no cell

    @property
    def cells(self) -> int:
        return len(self.positions)


class _Walk:
    """A cursor over the blob that refuses to read past its end."""

    def __init__(self, blob: bytes) -> None:
        self.blob, self.at = blob, 0

    def take(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.blob):
            raise WorkbenchError("llama.cpp's sequence state ends early; cannot read its KV cells")
        out = struct.unpack_from(fmt, self.blob, self.at)
        self.at += size
        return out

    def skip(self, n: int) -> None:
        self.at += n

    @property
    def done(self) -> bool:
        return self.at >= len(self.blob)


def _row_bytes(w: _Walk, cells: int) -> int:
    """Walk one stream's K then V rows; the K+V bytes of one cell over all layers."""
    v_trans, n_layer = w.take("<II")
    row = 0
    for _ in range(n_layer):
        _type, k_row = w.take("<iQ")
        w.skip(cells * k_row)
        row += k_row
    for _ in range(n_layer):  # a layer without a V tensor writes nothing: stop where the stream's data ends
        if w.done:
            break
        if v_trans:
            _type, el, n_embd = w.take("<iII")
            w.skip(cells * el * n_embd)
            row += el * n_embd
        else:
            _type, v_row = w.take("<iQ")
            w.skip(cells * v_row)
            row += v_row
    return row


def parse_state(blob: bytes) -> SeqState:
    """Walk one sequence's state blob (the layout above); :class:`WorkbenchError` when it is not that layout."""
    w = _Walk(blob)
    magic, _seq, streams = w.take("<IiI")
    if magic != STATE_IO_MAGIC:
        raise WorkbenchError(f"llama.cpp's sequence state has an unknown layout (first word {magic:#x})")
    positions: list[int] = []
    shared, row = False, None
    for _ in range(streams):  # every stream writes its cell count; only the sequence's own stream has cells
        (count,) = w.take("<I")
        if not count:
            continue
        if row is not None:
            raise WorkbenchError("llama.cpp's sequence state holds cells in two streams; cannot read its KV cells")
        for _ in range(count):
            pos, n_ids = w.take("<iI")
            positions.append(pos)
            shared |= n_ids != 1
            w.skip(4 * n_ids)
        row = _row_bytes(w, count)
    if w.at != len(blob):
        raise WorkbenchError(f"llama.cpp's sequence state does not parse as K/V rows ({w.at} of {len(blob)} bytes "
                             f"walked, {len(positions)} cells); cannot read its KV cells")
    return SeqState(tuple(positions), shared, row)


def parse_seq_file(data: bytes, seq_id: int = 0) -> SeqState:
    """A sequence state *file* (``llama_state_seq_save_file``, which llama-server's ``POST /slots/{id}?action=save``
    writes): u32 'ggsq' magic, u32 version, u32 token count and those i32 tokens, then the blob above without its
    io magic and seq id (src/llama-context.cpp ``state_seq_save_file``)."""
    if len(data) < 12:
        raise WorkbenchError("llama.cpp's sequence state file ends before its header")
    magic, version, n_tokens = struct.unpack_from("<III", data)
    if (magic, version) != (STATE_SEQ_MAGIC, STATE_SEQ_VERSION):
        raise WorkbenchError(f"not a llama.cpp sequence state file of version {STATE_SEQ_VERSION} "
                             f"(magic {magic:#x}, version {version})")
    return parse_state(struct.pack("<Ii", STATE_IO_MAGIC, seq_id) + data[12 + 4 * n_tokens:])
