"""A full disk (or quota, read-only or failing filesystem) is one line naming the file, never a traceback.

Found by writing an sbatch script onto a full tmpfs: the write's OSError reached main and printed a
traceback. The writes of imagebuild.util.files name their file on such an error, and main reports the
machine's limits (cli.app.MACHINE_LIMITS) in one line, exit 1; any other OSError stays a bug's traceback.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.cli import slurm as slurm_verb
from tests.unit.cli_support import disk_full_after, one_error_line

DIGEST = "sha256:" + "a" * 64
SLURM = ["slurm", "--nodes", "2", "--variant", "pp2xtp8", "--model-path", "/models/k3", "--image", f"127.0.0.1:5000/k3@{DIGEST}"]


def test_a_script_onto_a_full_disk_is_one_line_naming_it_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    disk_full_after(monkeypatch, files=0)
    assert main([*SLURM, "-o", str(tmp_path / "job.sbatch")]) == 1
    assert one_error_line(capsys) == (
        f"imagebuild: error: {tmp_path / 'job.sbatch'}: No space left on device; "
        "free some space there (or write elsewhere) and run it again\n"
    )
    assert list(tmp_path.iterdir()) == []  # neither the script nor its staged copy


def test_with_json_the_same_line_is_the_error_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    disk_full_after(monkeypatch, files=0)
    assert main([*SLURM, "-o", str(tmp_path / "job.sbatch"), "--json"]) == 1
    out, err = capsys.readouterr()
    document = json.loads(out)
    assert document["exit_code"] == 1
    assert f"imagebuild: error: {document['error']}\n" == err


@pytest.mark.parametrize(
    ("code", "advice"),
    [(errno.EROFS, "check that filesystem"), (errno.EIO, "check that filesystem"), (errno.EDQUOT, "free some space")],
)
def test_each_limit_of_the_machine_is_named_by_the_verb_when_no_file_is(
    code: int, advice: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def render_script(*args: object, **kwargs: object) -> str:
        raise OSError(code, "as the kernel says")

    monkeypatch.setattr(slurm_verb, "render_script", render_script)
    assert main(SLURM) == 1
    line = one_error_line(capsys)
    assert line.startswith("imagebuild: error: imagebuild slurm: as the kernel says; ")
    assert advice in line


def test_any_other_os_error_is_a_bug_and_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def render_script(*args: object, **kwargs: object) -> str:
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setattr(slurm_verb, "render_script", render_script)
    with pytest.raises(OSError, match="Bad file descriptor"):
        main(SLURM)
