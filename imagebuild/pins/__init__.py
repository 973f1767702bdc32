"""pins.toml: every source of the image, as typed, validated pins.

Only this package reads or writes pins.toml; everything else sees the frozen
dataclasses of ``kinds`` and ``files`` and ``apt`` (one class per kind of pin) and the ``PinSet`` of
``pinset``. Each pin records the ``fingerprint`` lock wrote it with, so an edit since (a
changed ref, a hand-edited commit) is seen offline (``base``). Writing (for ``imagebuild lock``) goes through tomlkit so comments,
order and formatting survive; the caller writes the text atomically. ``arch_pins``: the pins one
arch profile's image consumes (a pin's ``arches``) and the profile's pin names checked against them.
"""

from imagebuild.inputs.values import COMMIT_RE, COMMITTED_RE, DIGEST_RE, SHA256_RE
from imagebuild.pins.apt import AptPin
from imagebuild.pins.base import PYPI_SIMPLE, Drift, LockState, Pin, PinKind, Refresh
from imagebuild.pins.description import PackageUrl, PinDescription
from imagebuild.pins.files import PypiPin, TarballPin, WheelPin
from imagebuild.pins.kinds import PIN_TYPES, GitPin, ImagePin, ToolchainPin
from imagebuild.pins.pinset import IdentityUpdate, PinSet, load_pins, parse_pins, render_updates

__all__ = [
    "COMMITTED_RE",
    "COMMIT_RE",
    "DIGEST_RE",
    "PIN_TYPES",
    "PYPI_SIMPLE",
    "SHA256_RE",
    "AptPin",
    "Drift",
    "GitPin",
    "IdentityUpdate",
    "ImagePin",
    "LockState",
    "PackageUrl",
    "Pin",
    "PinDescription",
    "PinKind",
    "PinSet",
    "PypiPin",
    "Refresh",
    "TarballPin",
    "ToolchainPin",
    "WheelPin",
    "load_pins",
    "parse_pins",
    "render_updates",
]
