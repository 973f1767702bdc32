"""What a refused command leaves: one line on stderr, nothing on stdout; a disk that fills up."""

from __future__ import annotations

import errno
import os

import pytest

from imagebuild.util import files as util_files


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line the command wrote on stderr, with stdout empty and no traceback."""
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


def disk_full_after(monkeypatch: pytest.MonkeyPatch, files: int) -> None:
    """The disk fills up while the file after the first ``files`` is written (imagebuild.util.files' writes)."""
    real_fdopen = os.fdopen
    opened = 0

    def fdopen(fd: int, *args: object, **kwargs: object) -> object:
        nonlocal opened
        opened += 1
        if opened > files:
            os.close(fd)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fdopen(fd, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(util_files.os, "fdopen", fdopen)
