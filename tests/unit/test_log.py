"""The logger writes to stderr as it is when a message comes, not as it was at set-up."""

from __future__ import annotations

import io

import pytest

from imagebuild.log import logger, setup_logging


def test_a_message_after_stderr_was_swapped_goes_to_the_current_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    first = io.StringIO()
    monkeypatch.setattr("sys.stderr", first)
    setup_logging(0)
    first.close()  # as a test's capture is closed when the test ends
    second = io.StringIO()
    monkeypatch.setattr("sys.stderr", second)
    logger.warning("imagebuild: warning: something")
    assert second.getvalue() == "imagebuild: warning: something\n"
