"""The Hugging Face tokenizer folder AIPerf is given (``--tokenizer DIR``), written from the served model, and
its check against the server's own ``/tokenize``.

AIPerf sizes its synthetic prompts with a tokenizer; named by a Hub id it waits on the network (50 s here, then
fails), so the workbench hands it a local folder: a Hugging Face model directory's own files, or, for a GGUF, the
tokenizer the file carries (vocabulary, merges, special tokens, chat template), converted once per model digest
by ``transformers``' GGUF reader (it needs torch, which the ``vllm`` extra brings; AIPerf's own environment has
neither) and cached beside the workbench's synthetic models. Both environments read ``tokenizer.json`` with
the ``tokenizers`` library. Every table run checks the folder against the server on :data:`CHECK_TEXTS`: a
tokenizer that splits text otherwise than the server would size every prompt wrongly.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from .. import models
from ..engine import WorkbenchError
from ..models.hf import _gguf_metadata

PRE_SPLITS = {"smollm": r"\p{N}"}
"""llama.cpp's pre-tokenizer type (``tokenizer.ggml.pre``) → the split it makes before GPT-2's byte-level one
(llama-vocab.cpp: SmolLM isolates every numeric character, ``½`` included), which ``transformers``' GGUF
conversion leaves out."""

CHECK_TEXTS = ("Hello world, this is a test.", "  two  spaces\tand a tab\nnew line",
               "naïve café — 1234567 ½ 日本語", "def f(x): return x**2  # code")
"""Strings whose ids the written tokenizer and the server must agree on: words, runs of white space, digits,
accents, CJK and code."""


def folder_for(model: models.ResolvedModel, served: Path) -> Path:
    """The tokenizer folder for ``model`` served from ``served``: a Hugging Face directory itself (vLLM; a synthetic
    model's twin), else the one written from the GGUF."""
    if served.is_dir():
        return served
    target = models.cache_dir().parent / "tokenizers" / model.sha256[:16]
    if not (target / "tokenizer.json").is_file():
        _write_from_gguf(model.path, target)
    return target


def _write_from_gguf(gguf: Path, target: Path) -> None:
    """Convert ``gguf``'s tokenizer into ``target`` (written beside it, then renamed: never half a folder)."""
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise WorkbenchError(f"writing AIPerf's tokenizer from {gguf.name} needs transformers with torch ({e}); "
                             "install the vllm extra (`make setup`)") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, suffix=".tok.tmp"))
    try:
        AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(str(tmp))
        _add_pre_split(tmp / "tokenizer.json", _gguf_metadata(str(gguf))[0].get("tokenizer.ggml.pre"))
        try:
            os.rename(tmp, target)
        except OSError:  # another writer won: its folder holds the same tokenizer
            if not (target / "tokenizer.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _add_pre_split(path: Path, pre: str | None) -> None:
    """Put llama.cpp's own split for ``pre`` (:data:`PRE_SPLITS`) ahead of the converted pre-tokenizer."""
    if pre not in PRE_SPLITS:
        return
    from tokenizers import Regex, Tokenizer, pre_tokenizers

    tok = Tokenizer.from_file(str(path))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(PRE_SPLITS[pre]), "isolated"),
                                                 tok.pre_tokenizer])
    tok.save(str(path))


def encode(folder: Path, texts: tuple[str, ...] = CHECK_TEXTS) -> list[list[int]]:
    """``texts``' ids under ``folder``'s ``tokenizer.json``, without special tokens (as ``/tokenize`` is asked)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    return [tok.encode(t, add_special_tokens=False).ids for t in texts]


def check(folder: Path, server_ids: list[list[int]], url: str, texts: tuple[str, ...] = CHECK_TEXTS) -> None:
    """Refuse a tokenizer folder that disagrees with the server's ids for the same ``texts``."""
    for text, ours, theirs in zip(texts, encode(folder, texts), server_ids):
        if ours != theirs:
            raise WorkbenchError(f"the tokenizer in {folder} splits {text!r} into {len(ours)} tokens {ours[:8]}…, "
                                 f"the server at {url} into {len(theirs)} {theirs[:8]}…: AIPerf would size its "
                                 f"prompts wrongly; remove {folder} to have it written again from the model")
