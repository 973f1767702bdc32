"""Strict reading of TOML tables: unknown keys, missing keys and wrong types.

Every data file imagebuild reads (pins.toml, stages/*.toml, stages/arch/*.toml)
goes through these helpers, so every file rejects typos the same way and every
message names the file, the table and the key.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from imagebuild.errors import ConfigError


def suggest(word: str, choices: Collection[str]) -> str:
    """' Perhaps you meant 'x'?' when a close match exists, else ''."""
    close = difflib.get_close_matches(word, sorted(choices), n=1)
    return f" Perhaps you meant '{close[0]}'?" if close else ""


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file, turning I/O and syntax errors into ConfigError."""
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError as e:
        msg = f"{path}: file not found"
        raise ConfigError(msg) from e
    except tomllib.TOMLDecodeError as e:
        msg = f"{path}: invalid TOML: {e}"
        raise ConfigError(msg) from e


class Table:
    """A TOML table read strictly: every key must be known and typed."""

    def __init__(self, data: Mapping[str, Any], where: str) -> None:
        self.data = data
        self.where = where

    def check_keys(self, allowed: Collection[str]) -> None:
        for key in self.data:
            if key not in allowed:
                msg = (
                    f"{self.where}: unknown key '{key}'.{suggest(key, allowed)} "
                    f"Allowed keys: {', '.join(sorted(allowed))}"
                )
                raise ConfigError(msg)

    def _get(self, key: str, kind: type, required: bool) -> Any:
        if key not in self.data:
            if required:
                msg = f"{self.where}: missing required key '{key}'"
                raise ConfigError(msg)
            return None
        value = self.data[key]
        # bool is an int subclass; never accept one where the other is meant.
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            msg = f"{self.where}: '{key}' must be a {kind.__name__}, got {type(value).__name__} {value!r}"
            raise ConfigError(msg)
        return value

    def string(self, key: str, *, default: str | None = None) -> str:
        value: str | None = self._get(key, str, required=default is None)
        if value is None:
            assert default is not None  # _get raised for a missing required key
            return default
        return value

    def optional_string(self, key: str) -> str | None:
        value: str | None = self._get(key, str, required=False)
        return value

    def integer(self, key: str, *, default: int) -> int:
        value = self._get(key, int, required=False)
        return default if value is None else value

    def boolean(self, key: str, *, default: bool) -> bool:
        value = self._get(key, bool, required=False)
        return default if value is None else value

    def strings(self, key: str) -> list[str]:
        value = self._get(key, list, required=False) or []
        for item in value:
            if not isinstance(item, str):
                msg = f"{self.where}: '{key}' must be a list of strings, found {item!r}"
                raise ConfigError(msg)
        return list(value)

    def string_map(self, key: str) -> dict[str, str]:
        value = self._get(key, dict, required=False) or {}
        for k, v in value.items():
            if not isinstance(v, str):
                msg = f"{self.where}: '{key}.{k}' must be a string, got {v!r}"
                raise ConfigError(msg)
        return dict(value)

    def table(self, key: str) -> Table:
        value = self._get(key, dict, required=True)
        return Table(value, f"{self.where} [{key}]")
