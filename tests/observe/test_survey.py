"""The C/C++ entry-point survey (``workbench.observe.survey``) on handmade headers and ELF files."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from workbench.observe import survey

# --------------------------------------------------------------------------- the C/C++ entry-point survey

HEADER = """
namespace tensorrt_llm::executor {
class Executor
{
public:
    Executor(std::filesystem::path const& modelPath, ModelType modelType, ExecutorConfig const& executorConfig);
    Executor(BufferView const& engineBuffer, std::string const& jsonConfigStr, ModelType modelType,
        ExecutorConfig const& executorConfig,
        std::optional<std::map<std::string, Tensor>> const& managedWeights = std::nullopt);
    Executor(std::shared_ptr<Model> model, ExecutorConfig const& executorConfig);
    Executor(Executor const& executor) = delete;
    Executor(Executor&&) noexcept;
};
}
"""

LIBRARY = """
#include <filesystem>
#include <string>
namespace tensorrt_llm::executor {
struct BufferView { const char* data; unsigned long size; };
class Executor {
public:
    Executor(std::filesystem::path const& modelPath, int modelType);
    Executor(BufferView const& engineBuffer, std::string const& jsonConfigStr, int modelType);
    int enqueueRequest(int request);
};
Executor::Executor(std::filesystem::path const& p, int) {}
Executor::Executor(BufferView const&, std::string const&, int) {}
int Executor::enqueueRequest(int r) { return r; }
}
extern "C" int unrelated_function(void) { return 0; }
"""


def _elf64(symbols: list[tuple[str, bool]]) -> bytes:
    """A minimal little-endian ELF64 file: a .dynsym (name, defined?) with its .dynstr, and section headers."""
    dynstr = b"\0"
    offsets = []
    for name, _ in symbols:
        offsets.append(len(dynstr))
        dynstr += name.encode() + b"\0"
    dynsym = b"\0" * 24 + b"".join(struct.pack("<IBBHQQ", off, (1 << 4) | 2, 0, 7 if defined else 0, 0x1000, 8)
                                   for off, (_, defined) in zip(offsets, symbols))
    str_off = 64
    sym_off = str_off + len(dynstr)
    sh_off = sym_off + len(dynsym)
    header = (b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
              + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, sh_off, 0, 64, 0, 0, 64, 3, 0))
    null = b"\0" * 64
    strtab = struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, str_off, len(dynstr), 0, 0, 1, 0)
    symtab = struct.pack("<IIQQQQIIQQ", 0, 11, 2, 0, sym_off, len(dynsym), 1, 1, 8, 24)
    return header + dynstr + dynsym + null + strtab + symtab


def test_survey_reads_headers_and_a_handmade_elf(tmp_path):
    root = tmp_path / "site-packages" / "tensorrt_llm"
    (root / "include" / "tensorrt_llm" / "executor").mkdir(parents=True)
    (root / "include" / "tensorrt_llm" / "executor" / "executor.h").write_text(HEADER)
    (root / "libs").mkdir()
    mangled = "_ZN12tensorrt_llm8executor8ExecutorC1ERKNSt10filesystem7__cxx114pathENS0_9ModelTypeE"
    (root / "libs" / "libtensorrt_llm.so").write_bytes(_elf64([
        (mangled, True), ("_ZN12tensorrt_llm8executor8Executor14enqueueRequestEv", True),
        ("_ZN12tensorrt_llm8executor8Executor8shutdownEv", False), ("unrelated", True)]))
    (root / "libs" / "libbroken.so.1").write_bytes(b"not an elf")
    (root / "bindings.cpython-312-x86_64-linux-gnu.pyi").write_text("")
    s = survey.survey(root.parent, nm=None)
    assert s.headers == ("tensorrt_llm/include/tensorrt_llm/executor/executor.h",)
    assert [c.takes for c in s.constructors if c.source == "header"] == ["engine_dir", "engine_buffer",
                                                                         "runtime_model"]
    lib, broken = sorted(s.libraries, key=lambda lib: lib.path, reverse=True)
    assert lib.symbol_source == "elf" and len(lib.executor_symbols) == 2  # the undefined one is left out
    assert broken.symbol_source == "unavailable" and "ELF" in broken.error
    assert [c.takes for c in s.constructors if c.source == "symbol"] == ["engine_dir"]
    assert s.takes_engine_dir and not s.takes_model_code and s.symbol_channel == "elf"
    assert s.entry_kinds == ("engine_buffer", "engine_dir", "runtime_model")


@pytest.mark.skipif(not (shutil.which("g++") and shutil.which("nm")), reason="needs g++ and nm")
def test_survey_nm_and_elf_agree_on_a_compiled_library(tmp_path):
    src = tmp_path / "executor.cpp"
    src.write_text(LIBRARY)
    root = tmp_path / "pkg"
    root.mkdir()
    subprocess.run(["g++", "-std=c++17", "-shared", "-fPIC", "-o", str(root / "libexec.so"), str(src)], check=True)
    by_nm = survey.survey(root)
    by_elf = survey.survey(root, nm=None)
    assert by_nm.symbol_channel == "nm" and by_elf.symbol_channel == "elf"
    kinds = sorted(c.takes for c in by_nm.constructors)
    assert kinds == sorted(c.takes for c in by_elf.constructors)
    assert set(kinds) == {"engine_dir", "engine_buffer"}
    assert all("unrelated" not in sym for sym in by_nm.libraries[0].executor_symbols)


def test_survey_classifies_model_code_and_refuses_files():
    assert survey.classify("Executor(pybind11::object model, ExecutorConfig const&)") == "model_code"
    assert survey.classify("Executor(int)") == "other"
    with pytest.raises(NotADirectoryError):
        survey.survey(Path(__file__))
