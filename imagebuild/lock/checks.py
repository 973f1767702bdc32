"""What ``imagebuild lock`` checks before it touches the network.

Every field the lock sends somewhere (an image name and tag, a URL, a
version, the target python) is checked by its kind when pins.toml is read
(imagebuild.inputs.values, through the pin classes); what is left here is the
lock's own: its options, the pin names to upgrade, and the target python. A
mistake is the user's to fix (exit 2, naming the flag or pin), reported before
any request.
"""

from __future__ import annotations

import math

from imagebuild.errors import ConfigError
from imagebuild.pins import ImagePin, PinSet


def check_numbers(*, jobs: int, timeout: float, deadline: float) -> None:
    if jobs < 1:
        msg = f"--jobs must be at least 1, got {jobs}"
        raise ConfigError(msg)
    for flag, value in (("--timeout", timeout), ("--deadline", deadline)):
        if not (math.isfinite(value) and value > 0):
            msg = f"{flag} must be a positive number of seconds, got {value:g}"
            raise ConfigError(msg)


def check_pins(pinset: PinSet, upgrade_pins: tuple[str, ...]) -> None:
    for name in upgrade_pins:
        pinset.get(name)  # unknown name: ConfigError with a suggestion


def target_python_if_any(pinset: PinSet, base_pin: str) -> str | None:
    """The base image's python, which PyPI wheels must match; None without that image pin.

    ``base_pin`` is the stage definition's (stages/image.toml's final stage FROM).

    For the pins lock: only the PyPI pins need it, and each of them fails alone without it
    (sources.py says how to add one), so a pins file without a base image can still be locked.
    """
    for pin in pinset:
        if pin.name == base_pin and isinstance(pin, ImagePin):
            return pin.python
    return None


def require_target_python(pinset: PinSet, base_pin: str) -> str:
    """The base image's python; ConfigError naming the pins file without that image pin.

    For the python lock: every package it locks is matched to that python, so it cannot start without it.
    """
    return pinset.image(base_pin).python
