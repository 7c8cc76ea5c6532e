"""The lint gate (tools/lint.py): a function over the complexity gate fails unless the baseline names it."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint():
    spec = importlib.util.spec_from_file_location("lint", ROOT / "tools" / "lint.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _branches(name: str, n: int) -> str:
    body = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(n))
    return f"def {name}(x):\n{body}    return -1\n"


def _project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""\
        [tool.ruff.lint]
        select = ["F", "C901"]
        [tool.ruff.lint.mccabe]
        max-complexity = 10
        """))
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "rules.py").write_text(_branches("small", 3) + "\n\nclass Rule:\n" + textwrap.indent(_branches("decide", 12), "    "))
    return tmp_path


def test_a_function_over_the_gate_fails_unless_the_baseline_names_it(tmp_path):
    lint, root = _lint(), _project(tmp_path)
    found = lint.ruff(("pkg",), root=root)
    assert [lint.key(f, root) for f in found] == ["pkg/rules.py::Rule.decide::C901"]
    failing, stale = lint.gate(found, set(), root)
    assert len(failing) == 1 and "C901" in failing[0] and failing[0].startswith("pkg/rules.py:")
    assert lint.gate(found, {"pkg/rules.py::Rule.decide::C901"}, root) == ([], [])


def test_a_baseline_line_names_one_function_not_its_file(tmp_path):
    lint, root = _lint(), _project(tmp_path)
    (root / "pkg" / "rules.py").write_text((root / "pkg" / "rules.py").read_text() + "\n\n" + _branches("grown", 12))
    failing, _ = lint.gate(lint.ruff(("pkg",), root=root), {"pkg/rules.py::Rule.decide::C901"}, root)
    assert len(failing) == 1 and "`grown`" in failing[0]


def test_a_function_back_under_the_gate_is_named_for_deletion(tmp_path):
    lint, root = _lint(), _project(tmp_path)
    baseline = {"pkg/rules.py::Rule.decide::C901", "pkg/rules.py::small::C901"}
    assert lint.gate(lint.ruff(("pkg",), root=root), baseline, root) == ([], ["pkg/rules.py::small::C901"])


def test_any_other_ruff_finding_fails(tmp_path):
    lint, root = _lint(), _project(tmp_path)
    (root / "pkg" / "rules.py").write_text("import os\n")
    failing, _ = lint.gate(lint.ruff(("pkg",), root=root), set(), root)
    assert len(failing) == 1 and "F401" in failing[0]
