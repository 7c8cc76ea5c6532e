"""The lint gate `make test` runs before pytest: ruff (configured in pyproject.toml), with a baseline.

Ruff reports pyflakes errors and every function over the complexity and size gate (mccabe C901, branches
PLR0912, statements PLR0915). The functions that were over the gate when it came in are listed in
``tools/lint_baseline.txt`` as ``path::function::rule``, one a line; they pass until someone refactors them.
Anything else fails: a new function over the gate, or a baselined one that grew another violation. A line
whose function is back under the gate is named so it can be deleted (the baseline only shrinks).

    python tools/lint.py                   # the gate (exit 1 on a new violation)
    python tools/lint.py --write-baseline  # list what is over the gate now (only when introducing the gate)
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "tools" / "lint_baseline.txt"
GATE = {"C901", "PLR0912", "PLR0915"}  # the complexity and function-size rules a baseline line may excuse
PATHS = ("src", "tests", "tools")


def ruff(paths: tuple[str, ...] = PATHS, root: Path = ROOT) -> list[dict]:
    """Ruff's findings over ``paths`` (relative to ``root``), as its JSON output gives them."""
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "json", "--exit-zero", *paths],
                         cwd=root, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"ruff did not run (is the 'dev' extra installed?): {out.stderr.strip()}")
    return json.loads(out.stdout or "[]")


def _functions(path: Path) -> dict[int, str]:
    """Each function's ``def`` line in ``path`` and its dotted name (``Class.method``, ``outer.inner``)."""
    names: dict[int, str] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    names[child.lineno] = name
                walk(child, name + ".")
            else:
                walk(child, prefix)

    walk(ast.parse(path.read_text()), "")
    return names


def key(finding: dict, root: Path = ROOT) -> str:
    """``path::function::rule`` of a gate finding (ruff reports the ``def`` line); line numbers move, names stay."""
    path = Path(finding["filename"])
    function = _functions(path).get(finding["location"]["row"], f"line {finding['location']['row']}")
    return f"{path.relative_to(root).as_posix()}::{function}::{finding['code']}"


def read_baseline(path: Path = BASELINE) -> set[str]:
    if not path.is_file():
        return set()
    return {line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")}


def gate(findings: list[dict], baseline: set[str], root: Path = ROOT) -> tuple[list[str], list[str]]:
    """(what fails, baseline lines no longer needed). A gate finding fails unless its key is in the baseline;
    any other ruff finding always fails."""
    failing, excused = [], set()
    for f in findings:
        where = f"{Path(f['filename']).relative_to(root).as_posix()}:{f['location']['row']}"
        if f["code"] in GATE and (k := key(f, root)) in baseline:
            excused.add(k)
            continue
        failing.append(f"{where}: {f['code']} {f['message']}")
    return failing, sorted(baseline - excused)


def main(argv: list[str]) -> int:
    findings = ruff()
    if "--write-baseline" in argv:
        over = sorted({key(f) for f in findings if f["code"] in GATE})
        BASELINE.write_text("# Functions over the lint gate when it came in (tools/lint.py): refactor one, delete its "
                            "line.\n" + "".join(f"{k}\n" for k in over))
        print(f"wrote {len(over)} lines to {BASELINE.relative_to(ROOT)}")
        return 0
    failing, stale = gate(findings, read_baseline())
    for line in stale:
        print(f"lint: {line} is under the gate now; delete its line from {BASELINE.relative_to(ROOT)}")
    for line in failing:
        print(f"lint: {line}")
    if failing:
        print(f"lint: {len(failing)} finding(s). Over the gate: split the function (summarise → decide → explain); "
              "the baseline is for functions that were over it when the gate came in, not for new ones.")
        return 1
    print(f"lint: ruff clean; {len(read_baseline()) - len(stale)} baselined function(s) still over the gate")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
