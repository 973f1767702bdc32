"""What the check modules share: the context file the runner wrote, and how a check fails."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from imagebuild.verify.expectations import Expectations

CONTEXT_ENV = "IMAGEBUILD_VERIFY_CONTEXT"
RESULTS_ENV = "IMAGEBUILD_VERIFY_RESULTS"


class CheckFailure(AssertionError):
    """A failed check, with what it expected and what it found (both shown in the report)."""

    def __init__(self, what: str, *, expected: object, found: object) -> None:
        self.what = what
        self.expected = expected
        self.found = found
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.what}\nexpected: {self.expected}\nfound:    {self.found}"


def expect(ok: bool, what: str, *, expected: object, found: object) -> None:
    if not ok:
        raise CheckFailure(what, expected=expected, found=found)


@dataclass(frozen=True, kw_only=True)
class ImageConfig:
    """The image's config as the runner inspected it (host side, through the Engine)."""

    id: str
    labels: dict[str, str]
    env: dict[str, str]
    entrypoint: list[str] | None
    workdir: str
    history: list[str]


@cache
def _context() -> dict[str, Any]:
    path = os.environ.get(CONTEXT_ENV)
    if not path:
        msg = f"{CONTEXT_ENV} is not set: these checks run under `imagebuild verify`, not on their own"
        raise RuntimeError(msg)
    data: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    return data


def expectations() -> Expectations:
    return Expectations.from_json(_context()["expectations"])


def image_config() -> ImageConfig:
    return ImageConfig(**_context()["image"])


def redact(text: str, start: int, end: int) -> str:
    """A finding around text[start:end] that names the token's kind but never shows it whole."""
    token = text[start:end]
    before = text[max(0, start - 30) : start].replace("\n", " ")
    return f"...{before}{token[:4]}<redacted {len(token) - 4} chars>"
