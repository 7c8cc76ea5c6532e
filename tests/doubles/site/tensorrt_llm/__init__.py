"""``tensorrt_llm`` for a child process's ``PYTHONPATH``: the double (``tests/doubles/fake_tensorrt_llm``) under the
real package's name, its release from ``FAKE_TENSORRT_LLM_RELEASE`` (a run matrix's ``env_vars`` set both).

Tests only: it lets ``workbench run`` read two releases of the double as a matrix's two environments. Its findings
carry the double's ``__test_double__`` and settle nothing.
"""

from pathlib import Path

_FAKE = Path(__file__).resolve().parents[2] / "fake_tensorrt_llm"
__path__ = [str(_FAKE)]  # submodules (tensorrt_llm.llmapi, …) are the double's
exec(compile((_FAKE / "__init__.py").read_text(), str(_FAKE / "__init__.py"), "exec"))  # noqa: S102 - the double's own
