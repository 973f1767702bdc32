"""Progress on stderr, one logger; stdout is for data (render output, JSON)."""

from __future__ import annotations

import logging
import os
import sys
from typing import ClassVar, TextIO

from imagebuild.secrets import redact

logger = logging.getLogger("imagebuild")


class _Formatter(logging.Formatter):
    COLOURS: ClassVar[dict[int, str]] = {
        logging.WARNING: "\033[33m",
        logging.ERROR: "\033[31m",
        logging.DEBUG: "\033[2m",
    }

    def __init__(self, colour: bool) -> None:
        super().__init__("%(message)s")
        self.colour = colour

    def format(self, record: logging.LogRecord) -> str:
        # Whatever a message quotes (a URL, a command's output), no credential reaches the terminal or a CI log.
        text = redact(super().format(record))
        colour = self.COLOURS.get(record.levelno) if self.colour else None
        return f"{colour}{text}\033[0m" if colour else text


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to sys.stderr as it is at each message, not as it was at set-up: a caller that swaps it
    (a test's capture, an embedding tool) must not leave the logger writing to a closed stream."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def setup_logging(verbosity: int, *, quiet: bool = False) -> None:
    """-v: debug lines too; -q: warnings and errors only (quiet wins: it is asked for by scripts)."""
    handler = _StderrHandler()
    colour = sys.stderr.isatty() and "NO_COLOR" not in os.environ
    handler.setFormatter(_Formatter(colour))
    logger.handlers[:] = [handler]
    level = logging.WARNING if quiet else logging.DEBUG if verbosity > 0 else logging.INFO
    logger.setLevel(level)
    logger.propagate = False


def format_duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"
