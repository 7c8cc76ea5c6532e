"""Writing files so that a reader never sees half of one and a failure leaves nothing behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: str | Path, data: str | bytes, *, mode: int = 0o644, overwrite: bool = True) -> Path:
    """Write ``data`` to a temporary file beside ``path``, then move it into place.

    ``overwrite=False`` never replaces an existing file (:class:`FileExistsError`); either way the temporary
    file is removed when anything fails.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # mkstemp makes it private
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if path exists
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
