"""Chat messages rendered through the model's own template (as llama-cpp-python's ``llama_chat_format.py`` does),
in a sandboxed Jinja environment: a template is data from the model file, never trusted code."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ...engine import WorkbenchError


def render(template: str, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool, bos_token: str,
           eos_token: str, **variables: Any) -> str:
    """``messages`` through the Jinja chat ``template`` (the GGUF's ``tokenizer.chat_template``); ``variables``: more
    of the template's own (``enable_thinking``, ``reasoning_effort``), as llama.cpp's ``chat_template_kwargs``."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg: str) -> None:
        raise WorkbenchError(f"chat template error: {msg}")

    from jinja2 import TemplateError

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    try:
        return env.from_string(template).render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                                                bos_token=bos_token, eos_token=eos_token,
                                                raise_exception=raise_exception, **variables)
    except TemplateError as e:  # an unknown filter or tag, or one this sandbox refuses
        raise WorkbenchError(f"the chat template of this model cannot be rendered ({type(e).__name__}: {e}); fix "
                             "tokenizer.chat_template in the GGUF, or give the prompt as text or token ids") from None
    except (TypeError, ValueError, AttributeError) as e:  # the messages are not what the template expects
        raise WorkbenchError(f"the chat template of this model failed on these messages ({type(e).__name__}: {e}); each message "
                             "needs a string role and string content") from None
