"""environment.yml and pyproject.toml declare the same environment."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _norm(req: str) -> tuple[str, str]:
    name, spec = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", req).groups()
    return name.lower().replace("_", "-"), spec.replace(" ", "")


def _yaml_deps() -> dict[str, str]:
    deps = {}
    text = (ROOT / "environment.yml").read_text().split("dependencies:", 1)[1]
    for line in text.splitlines():
        m = re.match(r"^\s*-\s+(?!-)([A-Za-z0-9_.\-]+[^#]*)$", line)  # not pip options (-e, --extra-index-url)
        if m and not m.group(1).strip().endswith(":"):
            name, spec = _norm(m.group(1))
            deps[name] = spec
    return deps


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = dict(_norm(r) for r in project["dependencies"])
    for extra in ("notebooks", "llamacpp", "vllm", "fleet", "dev"):
        wanted |= dict(_norm(r) for r in project["optional-dependencies"][extra])
    have = _yaml_deps()
    have.pop("python", None)
    have.pop("pip", None)
    assert have == wanted
