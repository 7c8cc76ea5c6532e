"""Static survey of an installed package for the C/C++ entry-point probe.

The blueprint's open question: does TensorRT-LLM ship a C/C++ entry point that hosts the
PyTorch-native model path without a Python runtime? A survey answers what the *installed files*
say, without importing or running anything:

* the C/C++ headers shipped (``*.h``, ``*.hpp``);
* the shared libraries (``*.so``, ``*.so.N``) and their exported, defined dynamic symbols that
  mention ``executor``/``Executor`` — from ``nm -D --defined-only`` when binutils is installed,
  else from the ELF ``.dynsym``/``.dynstr`` tables read directly;
* every ``Executor`` constructor found (declared in a header or exported from a library), and what
  it takes: an engine directory (``std::filesystem::path``), engine buffers, a C++ runtime
  ``Model`` object, or model code (Python / torch objects).

A plain function over a directory, so it runs on a fixture tree as well as on ``site-packages``.
"""

from __future__ import annotations

import mmap
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

EXECUTOR_SYMBOL = re.compile(r"executor", re.IGNORECASE)
_CTOR_SYMBOL = re.compile(r"Executor::Executor\(|8ExecutorC[12]E")
_CTOR_DECL = re.compile(r"^\s*(?:explicit\s+)?Executor\s*\(", re.MULTILINE)
_COPY_OR_MOVE = re.compile(r"^\s*Executor\s*(?:const\s*)?&")
_TAKES = (  # first match wins: Python/torch parameters would be the model-code path the blueprint asks about
    ("model_code", re.compile(r"PyObject|pybind11|nanobind|torch|nn::Module")),
    ("engine_dir", re.compile(r"filesystem")),
    ("engine_buffer", re.compile(r"BufferView|vector<unsigned char|vector<uint8_t|vectorIh")),
    ("runtime_model", re.compile(r"\bModel\b|5Model")),
)


@dataclass(frozen=True)
class Constructor:
    source: str  # "header" | "symbol"
    where: str  # path relative to the surveyed root
    signature: str  # the declaration's parameter list, or the (demangled when possible) symbol
    takes: str  # "engine_dir" | "engine_buffer" | "runtime_model" | "model_code" | "other"


@dataclass(frozen=True)
class Library:
    path: str
    executor_symbols: tuple[str, ...]
    symbol_source: str  # "nm" | "elf" | "unavailable"
    error: str | None = None


@dataclass(frozen=True)
class PackageSurvey:
    root: str
    headers: tuple[str, ...]
    libraries: tuple[Library, ...]
    constructors: tuple[Constructor, ...]
    symbol_channel: str  # how symbols were read: "nm" | "elf"

    @property
    def entry_kinds(self) -> tuple[str, ...]:
        """What the found Executor constructors take, sorted and deduplicated."""
        return tuple(sorted({c.takes for c in self.constructors}))

    @property
    def takes_engine_dir(self) -> bool:
        return "engine_dir" in self.entry_kinds

    @property
    def takes_model_code(self) -> bool:
        return "model_code" in self.entry_kinds


def classify(signature: str) -> str:
    """What an Executor constructor takes, judged from its parameter text (demangled or mangled)."""
    for kind, pattern in _TAKES:
        if pattern.search(signature):
            return kind
    return "other"


def survey(root: Path, *, nm: str | None = "auto") -> PackageSurvey:
    """Survey ``root``. ``nm``: a path to nm, ``"auto"`` to look it up on PATH, None to read ELF directly."""
    root = Path(root)
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a directory")
    nm_path = shutil.which("nm") if nm == "auto" else nm
    files = sorted(p for p in root.rglob("*") if p.is_file())
    headers = [p for p in files if p.suffix in (".h", ".hpp")]
    libs = [p for p in files if p.suffix == ".so" or ".so." in p.name]
    constructors: list[Constructor] = []
    for h in headers:
        rel = str(h.relative_to(root))
        for params in _header_constructors(h.read_text(errors="replace")):
            constructors.append(Constructor("header", rel, params, classify(params)))
    libraries = []
    for lib in libs:
        rel = str(lib.relative_to(root))
        entry = _library(lib, rel, nm_path)
        libraries.append(entry)
        for sym in entry.executor_symbols:
            if _CTOR_SYMBOL.search(sym):
                constructors.append(Constructor("symbol", rel, sym, classify(sym)))
    return PackageSurvey(str(root), tuple(str(h.relative_to(root)) for h in headers), tuple(libraries),
                         tuple(constructors), "nm" if nm_path else "elf")


def _header_constructors(text: str) -> list[str]:
    """Parameter lists of ``Executor(...)`` declarations, copy and move constructors left out."""
    found = []
    for m in _CTOR_DECL.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        params = " ".join(text[m.end():i - 1].split())
        if not _COPY_OR_MOVE.match(params):
            found.append(params)
    return found


def _library(lib: Path, rel: str, nm_path: str | None) -> Library:
    if nm_path:
        try:
            out = subprocess.run([nm_path, "-D", "--defined-only", "-C", str(lib)], capture_output=True, text=True,
                                 timeout=120, check=True).stdout
        except (OSError, subprocess.SubprocessError) as e:
            return Library(rel, (), "unavailable", f"nm failed: {e}")
        names = [line.split(" ", 2)[2] for line in out.splitlines() if line.count(" ") >= 2]
        return Library(rel, tuple(n for n in names if EXECUTOR_SYMBOL.search(n)), "nm")
    try:
        names = _demangle(elf_defined_dynamic_symbols(lib))
    except (OSError, ValueError, struct.error) as e:
        return Library(rel, (), "unavailable", f"cannot read ELF dynamic symbols: {e}")
    return Library(rel, tuple(n for n in names if EXECUTOR_SYMBOL.search(n)), "elf")


def _demangle(names: list[str]) -> list[str]:
    """Demangle with c++filt when it is installed; mangled names still classify."""
    tool = shutil.which("c++filt")
    if not tool or not names:
        return names
    try:
        out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return names
    lines = out.stdout.splitlines()
    return lines if len(lines) == len(names) else names


def elf_defined_dynamic_symbols(path: Path) -> list[str]:
    """Names of the global/weak, defined symbols in an ELF file's ``.dynsym`` (what ``nm -D --defined-only`` lists)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b"\x7fELF":
            raise ValueError("not an ELF file")
        wide, order = m[4] == 2, {1: "<", 2: ">"}.get(m[5])
        if order is None or m[4] not in (1, 2):
            raise ValueError("unknown ELF class or byte order")
        if wide:
            shoff, = struct.unpack_from(order + "Q", m, 0x28)
            shentsize, shnum = struct.unpack_from(order + "HH", m, 0x3A)
            shdr, sym_fmt = order + "IIQQQQIIQQ", order + "IBBHQQ"
        else:
            shoff, = struct.unpack_from(order + "I", m, 0x20)
            shentsize, shnum = struct.unpack_from(order + "HH", m, 0x2E)
            shdr, sym_fmt = order + "IIIIIIIIII", order + "IIIBBH"
        sections = [struct.unpack_from(shdr, m, shoff + i * shentsize) for i in range(shnum)]
        names: list[str] = []
        for sec in sections:
            if sec[1] != 11:  # SHT_DYNSYM
                continue
            offset, size, link, entsize = sec[4], sec[5], sec[6], sec[9]
            str_off = sections[link][4]
            for pos in range(offset + entsize, offset + size, entsize):  # entry 0 is the null symbol
                fields = struct.unpack_from(sym_fmt, m, pos)
                if wide:
                    name_off, info, _other, shndx = fields[0], fields[1], fields[2], fields[3]
                else:
                    name_off, info, _other, shndx = fields[0], fields[3], fields[4], fields[5]
                if shndx == 0 or info >> 4 not in (1, 2):  # undefined, or not global/weak
                    continue
                end = m.find(b"\0", str_off + name_off)
                names.append(m[str_off + name_off:end].decode(errors="replace"))
        return names


__all__ = ["Constructor", "Library", "PackageSurvey", "classify", "elf_defined_dynamic_symbols", "survey"]
