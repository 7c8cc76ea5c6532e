"""Issue 36, unwritable or full output: every command that writes a file a person names checks it first, and a write
that fails midway leaves the person's file as it was. Each row runs the real command line: in-process
(``tests/clirun.py``) where the path is unwritable, in a child process where the disk is full (the limit is the
child's own).

"Unwritable" is a path under a regular file: it fails for root too (chmod does not stop root; no read-only mount can
be made here). "Full" caps the child's file size (RLIMIT_FSIZE; Python ignores SIGXFSZ, so the write gets EFBIG as a
full disk gets ENOSPC): the tiny write check passes, the real write fails midway through the real temp-file-and-
rename path. /dev/full was not used: a writer that writes beside its target would write into /dev as root."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from clirun import wb

ROOT = Path(__file__).resolve().parents[1]
FORGED = ROOT / "tests" / "fixtures" / "forged"  # one finding: enough for a write-back to change the file
FULL_BYTES = 4096  # above the write check's probe file, below the blueprint and the guide


def _full_disk() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (FULL_BYTES, FULL_BYTES))


def test_an_unwritable_or_full_output_exits_2_in_one_line_and_changes_nothing(tmp_path):
    shutil.copy(ROOT / "data" / "blueprint" / "blueprint.md", tmp_path / "bp.md")
    shutil.copy(ROOT / "data" / "guide" / "trtllm-gateway.md", tmp_path / "guide.md")
    (tmp_path / "notes.md").write_text("a person's notes, never to be lost\n")
    (tmp_path / "a-file").write_text("")
    bp, guide, notes, ro = (str(tmp_path / n) for n in ("bp.md", "guide.md", "notes.md", "a-file"))
    rows = [  # (case, command, full disk, the path the one line names, what it says was not done)
        ("writeback --out unwritable", ("writeback", bp, "--findings", str(FORGED), "--out", f"{ro}/out.md"), False,
         ro, "nothing was written"),
        ("writeback in place, disk full", ("writeback", bp, "--findings", str(FORGED)), True, bp,
         "nothing was changed"),
        ("writeback over an existing --out, disk full",
         ("writeback", bp, "--findings", str(FORGED), "--out", notes), True, notes, "nothing was changed"),
        ("events guide --out unwritable", ("events", "guide", str(FORGED), "--guide", guide, "--out", f"{ro}/g.md"),
         False, ro, "nothing was written"),
        ("events guide in place, disk full", ("events", "guide", str(FORGED), "--guide", guide), True, guide,
         "nothing was changed"),
        ("bench --out unwritable", ("bench", "-m", "synthetic:tiny", "--out", f"{ro}/b.json"), False, ro,
         "nothing was run"),
        ("serve --log-dir unwritable", ("serve", "llamacpp-server", "-m", "synthetic:tiny", "--log-dir",
                                        f"{ro}/logs"), False, ro, "no server was started"),
    ]
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    children = {case: subprocess.Popen([sys.executable, "-m", "workbench.cli", *args], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env,
                                       preexec_fn=_full_disk) for case, args, full, _, _ in rows if full}
    said_by = {case: wb(*args, cwd=tmp_path) for case, args, full, _, _ in rows if not full}
    for case, child in children.items():
        out, err = child.communicate(timeout=120)
        said_by[case] = subprocess.CompletedProcess(child.args, child.returncode, out, err)
    for case, _, _, path, said in rows:
        code, err = said_by[case].returncode, said_by[case].stderr
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, (case, err)
        assert lines[0].startswith("error: ") and path in lines[0] and said in lines[0], (case, err)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # byte for byte, no temp file left


def test_findings_points_at_the_recovery_folder_when_it_holds_findings(tmp_path, monkeypatch):
    """A finding its folder could not take is kept in $TMPDIR/workbench-recovered-UID/; the next `workbench findings`
    says so, unless it is listing that folder."""
    rescue = tmp_path / f"workbench-recovered-{os.getuid()}"
    rescue.mkdir()
    shutil.copy(next(FORGED.glob("*.json")), rescue)
    (tmp_path / "empty").mkdir()
    rows = [  # (case, folders listed, exit code, the recovery folder named on stderr)
        ("no findings folder", (), 2, True),
        ("another folder", ("empty",), 0, True),
        ("the recovery folder itself", (str(rescue),), 0, False),
    ]
    monkeypatch.setattr(tempfile, "tempdir", None)  # read again from TMPDIR, as a new process would
    for case, dirs, code, named in rows:
        r = wb("findings", *dirs, cwd=tmp_path, env={"TMPDIR": str(tmp_path)})
        assert r.returncode == code and len(r.stderr.splitlines()) == int(named) and "Traceback" not in r.stderr
        assert (f"1 finding(s) that could not be written where asked are kept in {rescue}" in r.stderr) == named, case
