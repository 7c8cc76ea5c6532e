"""The Hugging Face tokenizer folder AIPerf is given (``--tokenizer DIR``), written from the served model, and
its check against the server's own ``/tokenize``.

AIPerf sizes its synthetic prompts with a tokenizer; named by a Hub id it waits on the network (50 s here, then
fails), so the workbench hands it a local folder: a Hugging Face model directory's own files, or, for a GGUF, the
tokenizer the file carries (vocabulary, merges, special tokens, chat template), written once per model digest and
cached beside the workbench's synthetic models: a SentencePiece vocabulary (every synthetic model's) as llama.cpp
merges it (:func:`_write_spm`), any other converted by ``transformers``' GGUF reader (it needs torch, which the
``vllm`` extra brings; AIPerf's own environment has neither). Both environments read ``tokenizer.json`` with the
``tokenizers`` library. Every table run checks the folder against the server on :data:`CHECK_TEXTS`: a tokenizer
that splits text otherwise than the server would size every prompt wrongly, so that backend is not run, the
reason in its rows (:class:`TokenizerMismatch`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

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


class TokenizerMismatch(WorkbenchError):
    """The tokenizer folder splits a check text otherwise than the server: AIPerf would size every prompt wrongly,
    so that backend's cells are not run (the reason in the table), never measured on a wrong sizing."""


def folder_for(model: models.ResolvedModel, served: Path) -> Path:
    """The tokenizer folder for ``model`` served from ``served``: a Hugging Face directory itself (vLLM; a synthetic
    model's twin), else the one written from the GGUF: llama.cpp's own SentencePiece merging where the GGUF's
    tokenizer is one (:func:`_write_spm`: every synthetic model's), else ``transformers``' conversion."""
    if served.is_dir():
        return served
    root = models.cache_dir().parent / "tokenizers"
    spm = root / f"{model.sha256[:16]}-spm"
    if (spm / "tokenizer.json").is_file():
        return spm
    if _gguf_metadata(str(model.path))[0].get("tokenizer.ggml.model") == "llama":
        _written(spm, lambda tmp: _write_spm(model.path, tmp))
        return spm
    target = root / model.sha256[:16]
    if not (target / "tokenizer.json").is_file():
        _write_from_gguf(model.path, target)
    return target


def _written(target: Path, write: Callable[[Path], None]) -> None:
    """``write`` a folder beside ``target``, then rename it into place: never half a folder; another writer's, the
    same tokenizer, wins a race."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, suffix=".tok.tmp"))
    try:
        write(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "tokenizer.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


#: llama.cpp's token types (include/llama.h, llama_token_type)
_NORMAL, _UNKNOWN, _CONTROL, _USER, _BYTE = 1, 2, 3, 4, 6


def _write_spm(gguf: Path, folder: Path) -> None:
    """The tokenizer of a GGUF whose tokenizer is SentencePiece's (``tokenizer.ggml.model`` "llama"), as llama.cpp
    runs it (src/llama-vocab.cpp, ``llm_tokenizer_spm_session``): the text's characters merged two at a time, the
    adjacent pair whose joined text is the vocabulary's highest-scoring token first, the leftmost among equals;
    what stays no token falls back to its bytes; a space before the text (``add_space_prefix``) and every space
    as ``▁``. That is byte-fallback BPE whose merges are ranked by the score of the token each forms, on the
    text unsplit: written so, it gives llama-server's ids (``transformers``' conversion splits at spaces, which
    llama.cpp does not: "  two  spaces" came out one token short)."""
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, processors
    from tokenizers import models as tok_models

    fields = GGUFReader(str(gguf)).fields

    def value(key: str, default: Any = None) -> Any:
        return fields[key].contents() if key in fields else default

    tokens, scores = list(value("tokenizer.ggml.tokens")), list(value("tokenizer.ggml.scores"))
    kinds = list(value("tokenizer.ggml.token_type") or [_NORMAL] * len(tokens))
    vocab: dict[str, int] = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    ranked = sorted((i for i, k in enumerate(kinds) if k == _NORMAL and len(tokens[i]) > 1),
                    key=lambda i: (-scores[i], i))
    merges = list(dict.fromkeys((t[:k], t[k:]) for t in (tokens[i] for i in ranked) for k in range(1, len(t))
                                if t[:k] in vocab and t[k:] in vocab))
    unk = int(value("tokenizer.ggml.unknown_token_id", 0))
    tok = Tokenizer(tok_models.BPE(vocab, merges, unk_token=tokens[unk], byte_fallback=True, fuse_unk=False))
    prefix = bool(value("tokenizer.ggml.add_space_prefix", True))
    tok.normalizer = normalizers.Sequence([*([normalizers.Prepend("▁")] if prefix else []),
                                           normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     *([decoders.Strip(" ", 1, 0)] if prefix else [])])
    bos, eos = value("tokenizer.ggml.bos_token_id"), value("tokenizer.ggml.eos_token_id")
    if bos is not None and value("tokenizer.ggml.add_bos_token", True):
        tok.post_processor = processors.TemplateProcessing(single=f"{tokens[bos]} $A", pair=f"{tokens[bos]} $A $B",
                                                           special_tokens=[(tokens[bos], int(bos))])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, k in zip(tokens, kinds) if k in (_CONTROL, _UNKNOWN)])
    tok.add_tokens([AddedToken(t, normalized=False) for t, k in zip(tokens, kinds) if k == _USER])
    tok.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": tokens[unk],
              **({"bos_token": tokens[bos]} if bos is not None else {}),
              **({"eos_token": tokens[eos]} if eos is not None else {})}
    if value("tokenizer.chat_template"):
        config["chat_template"] = value("tokenizer.chat_template")
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1))


def _write_from_gguf(gguf: Path, target: Path) -> None:
    """Convert ``gguf``'s tokenizer into ``target`` with ``transformers``' GGUF reader."""
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise WorkbenchError(f"writing AIPerf's tokenizer from {gguf.name} needs transformers with torch ({e}); "
                             "install the vllm extra (`make setup`)") from None

    def write(tmp: Path) -> None:
        AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(str(tmp))
        _add_pre_split(tmp / "tokenizer.json", _gguf_metadata(str(gguf))[0].get("tokenizer.ggml.pre"))

    _written(target, write)


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
            raise TokenizerMismatch(f"the tokenizer in {folder} splits {text!r} into {len(ours)} tokens {ours[:8]}…, "
                                 f"the server at {url} into {len(theirs)} {theirs[:8]}…: AIPerf would size its "
                                 f"prompts wrongly; remove {folder} to have it written again from the model")
