"""A chat trace rendered offline: the served model's own tokenizer folder (its Hugging Face directory:
``tokenizer.json`` and the chat template in ``tokenizer_config.json``), read by ``transformers`` with no Hub
access, as the loop's renderer asks (:class:`workbench.loop.render.Tokenizer`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from ..engine import WorkbenchError


class LocalChat:
    """``render`` (the template as text), ``prompt_tokens`` (rendered, then tokenized with its special tokens
    parsed, no BOS beyond the template's) and ``tokenize``, over the tokenizer in ``folder``."""

    def __init__(self, folder: str | Path) -> None:
        try:
            from transformers import AutoTokenizer
        except ImportError as e:
            raise WorkbenchError(f"rendering a chat trace offline needs transformers ({e}); install the vllm extra "
                                 "(`make setup`)") from None
        self._tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        if not getattr(self._tok, "chat_template", None):
            raise WorkbenchError(f"{folder} has no chat template: a chat trace cannot be rendered with it")

    def render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True) -> str:
        return self._tok.apply_chat_template([dict(m) for m in messages], tokenize=False,
                                             add_generation_prompt=add_generation_prompt)

    def prompt_tokens(self, prompt: Any) -> list[int]:
        return self.tokenize(self.render(prompt), add_bos=False)

    def tokenize(self, text: str, *, special: bool = True, add_bos: bool | None = None) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=bool(add_bos)))
