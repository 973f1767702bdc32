"""The shutdown sentinel: a file on the log volume all nodes share, raised by the head however it
exits. Workers watch for it and stop their headless vLLM; without it they idled for hours after the
benchmark finished, because nothing else ever stops a headless vLLM."""

from __future__ import annotations

import os
import time
from pathlib import Path

from .messages import say

SENTINEL_NAME = ".shutdown"


def raise_sentinel(path: Path) -> None:
    """Tell the workers to stop. Idempotent: the first reason written stays."""
    try:
        if path.exists():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"raised by the head, pid {os.getpid()}, at {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
    except OSError as error:
        say(f"could not raise the shutdown sentinel {path} ({error}): workers will not stop on their own")


def clear_stale_sentinel(path: Path) -> None:
    """A sentinel left by an earlier run in the same log directory would stop the workers at once."""
    path.unlink(missing_ok=True)
