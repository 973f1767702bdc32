"""What ``imagebuild lock`` checks before it touches the network.

Options, pin names to upgrade, and every field the lock sends somewhere
(an image name and tag, a URL, a version, the target python): a mistake here
is the user's to fix (exit 2, naming the file, pin and key), and is reported
before any request, not as a confusing upstream failure later.
"""

from __future__ import annotations

import math
import re
from urllib.parse import urlsplit

from packaging.version import InvalidVersion, Version

from imagebuild.errors import ConfigError
from imagebuild.lock.registry import parse_image_name
from imagebuild.pins import ImagePin, Pin, PinSet, PypiPin, WheelPin

# docker's tag grammar (distribution/reference): a word character, then up to 127 of [\w.-]
TAG_RE = re.compile(r"^\w[\w.-]{0,127}$", re.ASCII)
PYTHON_RE = re.compile(r"^3\.\d{1,2}$")


def check_numbers(*, jobs: int, timeout: float, deadline: float) -> None:
    if jobs < 1:
        msg = f"--jobs must be at least 1, got {jobs}"
        raise ConfigError(msg)
    for flag, value in (("--timeout", timeout), ("--deadline", deadline)):
        if not (math.isfinite(value) and value > 0):
            msg = f"{flag} must be a positive number of seconds, got {value:g}"
            raise ConfigError(msg)


def check_pins(pinset: PinSet, upgrade_pins: tuple[str, ...], *, needs_python: bool) -> None:
    for name in upgrade_pins:
        pinset.get(name)  # unknown name: ConfigError with a suggestion
    for pin in pinset:
        _check_pin(pin)
    if needs_python:
        python = target_python(pinset)
        if python is not None and not PYTHON_RE.fullmatch(python):
            msg = f"{pinset.path} [base]: python = {python!r} must be MAJOR.MINOR, e.g. '3.12'"
            raise ConfigError(msg)


def target_python(pinset: PinSet) -> str | None:
    """The base image's python, which PyPI wheels must match."""
    for pin in pinset:
        if pin.name == "base" and isinstance(pin, ImagePin):
            return pin.python
    return None


def _check_pin(pin: Pin) -> None:
    where = f"{pin.source} [{pin.name}]"
    if isinstance(pin, ImagePin):
        try:
            parse_image_name(pin.image)
        except ConfigError as e:
            msg = f"{where}: {e}"
            raise ConfigError(msg) from e
        if not TAG_RE.fullmatch(pin.tag):
            msg = f"{where}: tag = {pin.tag!r} is not a docker tag (letters, digits, '_', '.', '-'; at most 128)"
            raise ConfigError(msg)
    elif isinstance(pin, WheelPin):
        _check_url(where, "url", pin.url)
    elif isinstance(pin, PypiPin):
        _check_url(where, "index", pin.index)
        try:
            Version(pin.version)
        except InvalidVersion as e:
            msg = (
                f"{where}: version = {pin.version!r} is not a release version; pin an exact one, e.g. '0.2.4'"
            )
            raise ConfigError(msg) from e


def _check_url(where: str, key: str, url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        msg = f"{where}: {key} = {url!r} is not an http(s) URL"
        raise ConfigError(msg)
