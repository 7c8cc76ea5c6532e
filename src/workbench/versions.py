"""Release order of engine versions: a leaf module, so that whoever sorts versions imports nothing else."""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version


def natural(version: str | None) -> tuple:
    """Release order: PEP 440 where the version parses ('1.2.0rc1' before '1.2.0', '0.3.16' after '0.3.9'),
    else digit runs compared as numbers; unparseable versions sort before parseable ones."""
    try:
        return (1, Version(version or ""), [])
    except InvalidVersion:
        return (0, Version("0"), [int(p) if i % 2 else p for i, p in enumerate(re.split(r"(\d+)", version or ""))])
