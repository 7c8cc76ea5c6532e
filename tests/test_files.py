"""Output folders checked before anything runs: a concurrent check is not a failure."""

from __future__ import annotations

import os

import pytest

from workbench import files


def test_a_folder_removed_by_a_concurrent_check_is_made_again(tmp_path, monkeypatch):
    """Two runs queued on one folder check it at once; the other check removed the folder it had made between
    this one's mkdir and its write (seen in CI as 'run folder … cannot be written (No such file or directory)')."""
    real_open, raced = os.open, []

    def racing_open(path, *args, **kwargs):
        if not raced:
            raced.append(path)
            os.rmdir(os.path.dirname(path))  # the other check removes the folder it made
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(files.os, "open", racing_open)
    target = tmp_path / "run" / "findings"
    assert files.check_writable(target) == target and raced
    assert not target.exists()  # what the check made it removes again


def test_an_unwritable_folder_is_still_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(files.os, "open", lambda *a, **k: (_ for _ in ()).throw(PermissionError(13, "Permission denied")))
    with pytest.raises(files.OutputError, match="Permission denied"):
        files.check_writable(tmp_path / "out")
