"""A pins file: its pins in file order, reading it strictly and rewriting identity fields only."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.errors import ConfigError
from imagebuild.inputs.schema import Table, read_toml, suggest
from imagebuild.inputs.values import PIN_NAME_RE, escape_controls, shown
from imagebuild.pins.base import Pin
from imagebuild.pins.kinds import ImagePin, parse_pin


@dataclass(frozen=True)
class PinSet:
    """All pins of one pins file, in file order."""

    path: Path
    pins: tuple[Pin, ...]

    def __iter__(self) -> Iterator[Pin]:
        return iter(self.pins)

    def names(self) -> list[str]:
        return [p.name for p in self.pins]

    def get(self, name: str) -> Pin:
        for pin in self.pins:
            if pin.name == name:
                return pin
        msg = f"{self.path}: no pin named {shown(name)}.{suggest(name, self.names())} Pins: {', '.join(self.names())}"
        raise ConfigError(msg)

    def image(self, name: str) -> ImagePin:
        pin = self.get(name)
        if not isinstance(pin, ImagePin):
            msg = f'{self.path}: [{name}] must be kind = "image", is "{pin.kind}"'
            raise ConfigError(msg)
        return pin

    def images(self) -> list[ImagePin]:
        """The image pins (base, donor), in file order."""
        return [pin for pin in self.pins if isinstance(pin, ImagePin)]

    def build_args(self) -> dict[str, str]:
        """Every pin's ARGs; ARG names are unique across pins by construction."""
        args: dict[str, str] = {}
        for pin in self.pins:
            args.update(pin.build_args())
        return args

    def arg_owner(self) -> dict[str, Pin]:
        return {arg: pin for pin in self.pins for arg in pin.build_args()}


def load_pins(path: Path) -> PinSet:
    return parse_pins(read_toml(path, "pins file"), path)


def parse_pins(data: Mapping[str, Any], path: Path) -> PinSet:
    pins: list[Pin] = []
    for name, value in data.items():
        if not isinstance(value, dict):
            msg = f"{path}: top-level key {shown(name)} must be a table [{escape_controls(name)}]"
            raise ConfigError(msg)
        if not PIN_NAME_RE.fullmatch(name):
            msg = f"{path}: pin name {shown(name)} must be lowercase letters, digits and '_'"
            raise ConfigError(msg)
        pins.append(parse_pin(name, Table(value, f"{path} [{name}]"), path))
    return PinSet(path, tuple(pins))


# Writing -------------------------------------------------------------------

IdentityUpdate = Mapping[str, Mapping[str, str | int]]
"""pin name -> {identity key -> new value}."""


def render_updates(path: Path, updates: IdentityUpdate) -> str:
    """pins.toml's text with the identity fields in ``updates`` replaced.

    Only identity keys and the fingerprint may change: what a human tracks is never rewritten.
    """
    pinset = load_pins(path)
    import tomlkit  # only lock writes pins.toml: keep it off every other command's start-up

    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    for name, fields in updates.items():
        pin = pinset.get(name)
        for key, value in fields.items():
            if key not in (*pin.identity_keys, "fingerprint"):
                msg = f"{path}: [{name}] '{key}' is not an identity field of a {pin.kind} pin"
                raise ConfigError(msg)
            table = doc[name]
            assert isinstance(table, tomlkit.items.Table)
            table[key] = value
    text = tomlkit.dumps(doc)
    parse_pins(tomllib.loads(text), path)  # never write a file we could not read back
    return text
