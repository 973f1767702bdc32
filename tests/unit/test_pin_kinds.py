"""Per-kind behaviour lives on the pin classes (and one resolver table): every kind is complete."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.lock.sources import RESOLVERS
from imagebuild.pins import PIN_TYPES, Pin, PinKind, Refresh, load_pins, parse_pins
from tests.unit.attest_support import pin_data

REPO = Path(__file__).resolve().parents[2]


def test_every_kind_has_a_class_whose_identity_is_among_its_keys() -> None:
    assert set(PIN_TYPES) == set(PinKind)
    for kind, cls in PIN_TYPES.items():
        assert cls.kind is kind
        assert set(cls.identity_keys) <= set(cls.keys), cls


def test_every_kind_describes_itself_for_the_sbom_and_provenance() -> None:
    """The documents ask each pin (Pin.describe); a kind without it would fail the build's attestations."""
    pins = parse_pins(pin_data(), Path("pins.toml"))  # every identity filled
    assert {p.kind for p in pins} == set(PinKind)
    for pin in pins:
        described = pin.describe()
        assert described.version
        assert described.purl.name
    for cls in PIN_TYPES.values():
        assert cls.describe is not Pin.describe, cls


def test_every_pin_lock_may_refresh_has_a_resolver() -> None:
    pins = load_pins(REPO / "pins.toml")
    assert {p.kind for p in pins} == set(PinKind), "pins.toml should show every kind"
    for pin in pins:
        if pin.refresh is not Refresh.NEVER:
            assert pin.kind in RESOLVERS, f"{pin.kind} pins are refreshed but nothing resolves them"


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ({"kind": "git", "url": "https://example.org/r.git", "commit": ""}, Refresh.NEVER),
        ({"kind": "git", "url": "https://example.org/r.git", "tag": "v1", "commit": ""}, Refresh.ALWAYS),
        ({"kind": "wheel", "url": "https://x/a.whl", "version": "1", "sha256": ""}, Refresh.WHEN_EMPTY),
        ({"kind": "toolchain", "version": "1.88.0"}, Refresh.NEVER),
    ],
)
def test_refresh_policy_by_kind(table: dict[str, str], expected: Refresh) -> None:
    (pin,) = parse_pins({"p": table}, Path("pins.toml"))
    assert pin.refresh is expected


def test_identity_fields_report_empty_identities_as_empty() -> None:
    table = {
        "kind": "pypi",
        "project": "x",
        "version": "1",
        "index": "https://pypi.org/simple/",
        "filename": "",
        "sha256": "",
    }
    (pin,) = parse_pins({"p": table}, Path("pins.toml"))
    assert pin.identity_fields() == {"filename": "", "sha256": ""}
