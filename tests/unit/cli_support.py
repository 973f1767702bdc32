"""What a refused command leaves: one line on stderr, nothing on stdout."""

from __future__ import annotations

import pytest


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line the command wrote on stderr, with stdout empty and no traceback."""
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err
