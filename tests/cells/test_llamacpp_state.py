"""The llama.cpp cell's readers of engine bytes, on synthetic input (no model): the state blob and the batch.

The blobs are laid out as ``llama_state_seq_get_data`` writes them (ggml-org/llama.cpp src/llama-context.cpp
``state_seq_write_data``; src/llama-kv-cache.cpp ``state_write_meta``, ``state_write_data``)."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import pytest

from workbench.cells.llamacpp._internals import fill_batch, kv_buffer_bytes
from workbench.cells.llamacpp.state import STATE_IO_MAGIC, STATE_SEQ_MAGIC, parse_seq_file, parse_state
from workbench.engine import WorkbenchError


def blob(positions=(0, 1, 2), *, seq_ids=None, v_trans=False, v=True, n_layer=2, k_row=8, v_row=6, el=2, n_embd=3,
         magic=STATE_IO_MAGIC, empty_streams_before=0) -> bytes:
    """One sequence's state: empty streams first, then the stream that holds its cells and their K/V rows."""
    seq_ids = seq_ids or {}
    out = struct.pack("<IiI", magic, 0, empty_streams_before + 1) + struct.pack("<I", 0) * empty_streams_before
    out += struct.pack("<I", len(positions))
    for pos in positions:
        ids = seq_ids.get(pos, [0])
        out += struct.pack("<iI", pos, len(ids)) + struct.pack(f"<{len(ids)}i", *ids)
    if not positions:
        return out
    n = len(positions)
    out += struct.pack("<II", int(v_trans), n_layer)
    for _ in range(n_layer):
        out += struct.pack("<iQ", 1, k_row) + b"\1" * (n * k_row)
    for _ in range(n_layer if v else 0):
        out += (struct.pack("<iII", 1, el, n_embd) + b"\2" * (n * el * n_embd) if v_trans
                else struct.pack("<iQ", 1, v_row) + b"\2" * (n * v_row))
    return out


def test_a_state_gives_its_cells_positions_and_row_bytes():
    s = parse_state(blob((4, 5, 7)))
    assert s.positions == (4, 5, 7) and s.cells == 3 and not s.shared
    assert s.row_bytes == 2 * (8 + 6)  # K and V rows over both layers


def test_a_transposed_v_counts_element_size_times_width():
    assert parse_state(blob(v_trans=True)).row_bytes == 2 * (8 + 2 * 3)


def test_layers_without_a_v_tensor_write_nothing():
    assert parse_state(blob(v=False)).row_bytes == 2 * 8


def test_a_cell_shared_with_another_sequence_is_seen():
    s = parse_state(blob((0, 1), seq_ids={1: [0, 3]}))
    assert s.positions == (0, 1) and s.shared


def test_a_cache_split_per_sequence_writes_the_other_streams_empty_after_it():
    """llama-server -np 2 (no unified KV): slot 0's state is its own stream's cells, then stream 1's count 0."""
    head = blob((0, 1))
    split = head[:8] + struct.pack("<I", 2) + head[12:] + struct.pack("<I", 0)
    assert parse_state(split).row_bytes == 2 * (8 + 6)
    twice = head[:8] + struct.pack("<I", 2) + head[12:] + head[12:]
    with pytest.raises(WorkbenchError, match="two streams"):
        parse_state(twice)


def test_a_saved_slot_file_is_its_header_and_tokens_then_the_state_without_its_io_header():
    """``llama_state_seq_save_file`` (llama-server's slot save): 'ggsq', version 3, the token ids, the state."""
    state = blob((0, 1, 2))[8:]  # the file has no io magic and seq id
    file = struct.pack("<III", STATE_SEQ_MAGIC, 3, 3) + struct.pack("<3i", 7, 8, 9) + state
    assert parse_seq_file(file).positions == (0, 1, 2) and parse_seq_file(file).row_bytes == 2 * (8 + 6)
    with pytest.raises(WorkbenchError, match="version 3"):
        parse_seq_file(struct.pack("<III", STATE_SEQ_MAGIC, 2, 0) + state)
    with pytest.raises(WorkbenchError, match="header"):
        parse_seq_file(b"ggsq")


def test_an_empty_sequence_holds_no_cell_and_no_rows():
    s = parse_state(blob(()))
    assert s.positions == () and s.row_bytes is None


def test_the_sequence_is_read_from_the_first_stream_that_holds_cells():
    assert parse_state(blob((2, 3), empty_streams_before=2)).positions == (2, 3)


@pytest.mark.parametrize(("data", "message"), [
    (blob(magic=0x12345678), "unknown layout"),
    (blob()[:30], "ends early"),
    (blob()[:8], "ends early"),
    (blob() + b"\0" * 4, "does not parse|ends early"),
    (blob() + b"\0" * 40, "does not parse|ends early"),
])
def test_any_other_layout_is_an_error_not_a_guess(data, message):
    with pytest.raises(WorkbenchError, match=message):
        parse_state(data)


def _batch(n):
    """A ``llama_batch`` as include/llama.h declares it (token, pos, n_seq_id, seq_id, logits arrays)."""
    return SimpleNamespace(token=[None] * n, pos=[None] * n, n_seq_id=[None] * n, seq_id=[[None] for _ in range(n)],
                           logits=[None] * n, n_tokens=0)


def test_a_batch_asks_for_the_last_logits_only_unless_all():
    b = _batch(4)
    fill_batch(b, [11, 12, 13], pos0=5, seq_id=2)
    assert (b.token[:3], b.pos[:3], b.n_seq_id[:3], [s[0] for s in b.seq_id[:3]], b.logits[:3], b.n_tokens) == (
        [11, 12, 13], [5, 6, 7], [1, 1, 1], [2, 2, 2], [0, 0, 1], 3)
    fill_batch(b, [11, 12], pos0=0, seq_id=0, logits_last=False)
    assert b.logits[:2] == [0, 0] and b.n_tokens == 2
    fill_batch(b, [11, 12], pos0=0, seq_id=0, logits_all=True, logits_last=False)
    assert b.logits[:2] == [1, 1]


def test_the_kv_buffer_the_log_states_is_summed_over_its_lines():
    lines = ["llama_kv_cache: CPU KV buffer size =     1.50 MiB\n", "other\n", "KV buffer size = 0.50 MiB"]
    assert kv_buffer_bytes(lines) == 2 * 2**20 and kv_buffer_bytes(["nothing"]) is None
