"""How the launcher speaks: one LauncherError line for a failure, say() for progress.

stdout carries vLLM's output and dry-run data, so everything of the launcher's own goes to stderr.
"""

from __future__ import annotations

import sys

EXIT_FAILED = 1  # vLLM, the benchmark or the barrier failed or timed out
EXIT_BAD_INPUT = 2  # an input or recipe is wrong; nothing was started
EXIT_SIGNAL_BASE = 128  # 128 + N: stopped by signal N


class LauncherError(Exception):
    """An error for the user: one line naming the variable or file and what to do, plus optional detail."""

    def __init__(self, message: str, *, exit_code: int = EXIT_BAD_INPUT, detail: str = "") -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.detail = detail


def say(message: str) -> None:
    """Launcher progress on stderr, prefixed so it stands out among vLLM's lines."""
    print(f"[serve] {message}", file=sys.stderr, flush=True)
