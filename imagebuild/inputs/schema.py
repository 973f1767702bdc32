"""Strict reading of TOML tables: unknown keys, missing keys, wrong types and values of the wrong kind.

Every data file imagebuild reads (pins.toml, stages/*.toml, stages/arch/*.toml)
goes through these helpers, so every file rejects typos the same way and every
message names the file, the table and the key. Every string is checked for
control characters, and a value of a known kind (imagebuild.inputs.values) against
that kind, as it is read: nothing malformed gets past the file it came from.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from imagebuild.errors import ConfigError
from imagebuild.inputs.values import TEXT, Kind, control_problem, shown


def suggest(word: str, choices: Collection[str]) -> str:
    """' Perhaps you meant 'x'?' when a close match exists, else ''."""
    close = difflib.get_close_matches(word, sorted(choices), n=1)
    return f" Perhaps you meant '{close[0]}'?" if close else ""


def read_text_file(path: Path, what: str = "file") -> str:
    """A regular UTF-8 file's text; ConfigError (naming the file) for anything else.

    A directory, a FIFO (which would block), a symlink loop, an unreadable file or
    bytes that are not UTF-8 are the user's to fix, not a traceback.
    """
    try:
        if not path.is_file():
            if path.is_dir():
                problem = f"is a directory, not a {what}"
            elif path.exists() or path.is_symlink():
                problem = f"is not a regular file (a {what} must be one)"
            else:
                problem = f"{what} not found"
            msg = f"{path}: {problem}"
            raise ConfigError(msg)
        data = path.read_bytes()
    except OSError as e:
        msg = f"{path}: cannot read the {what} ({e.strerror or e})"
        raise ConfigError(msg) from e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        msg = f"{path}:{line}: the {what} is not UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start}); save it as UTF-8"
        raise ConfigError(msg) from e


def read_toml(path: Path, what: str = "TOML file", *, fix: str = "") -> dict[str, Any]:
    """Parse a TOML file, turning I/O, encoding and syntax errors into ConfigError (``fix``: what to do
    about a syntax error, when the file is one the tool writes)."""
    text = read_text_file(path, what)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        msg = f"{path}: invalid TOML: {e}{f'; {fix}' if fix else ''}"
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
                    f"{self.where}: unknown key {shown(key)}.{suggest(key, allowed)} "
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
            msg = (
                f"{self.where}: '{key}' must be a {kind.__name__}, got {type(value).__name__} {shown(value)}"
            )
            raise ConfigError(msg)
        return value

    def _text(self, key: str, value: str) -> str:
        problem = control_problem(value)
        if problem:
            msg = f"{self.where}: '{key}' = {shown(value)} {problem}"
            raise ConfigError(msg)
        return value

    def string(self, key: str, *, default: str | None = None, kind: Kind = TEXT) -> str:
        """A string of ``kind``; ``default`` when the key is missing (required when there is none)."""
        value: str | None = self._get(key, str, required=default is None)
        if value is None:
            assert default is not None  # _get raised for a missing required key
            return default
        return kind.check(value, self.where, key)

    def optional_string(self, key: str, *, kind: Kind = TEXT) -> str | None:
        """A string of ``kind``, or None when the key is missing or empty."""
        value: str | None = self._get(key, str, required=False)
        return kind.check(value, self.where, key) if value else None

    def paragraph(self, key: str) -> str:
        """Prose that may span lines in the file (a step's 'why'), folded to one line."""
        value: str = self._get(key, str, required=True)
        self._text(key, re.sub(r"[\n\r\t]", " ", value))
        return " ".join(value.split())

    def integer(self, key: str, *, default: int) -> int:
        value = self._get(key, int, required=False)
        return default if value is None else value

    def boolean(self, key: str, *, default: bool) -> bool:
        value = self._get(key, bool, required=False)
        return default if value is None else value

    def strings(self, key: str, *, kind: Kind = TEXT) -> list[str]:
        value = self._get(key, list, required=False) or []
        for i, item in enumerate(value):
            if not isinstance(item, str):
                msg = f"{self.where}: '{key}' must be a list of strings, found {shown(item)}"
                raise ConfigError(msg)
            kind.check(item, self.where, f"{key}[{i}]")
        return list(value)

    def string_map(self, key: str, *, names: Kind = TEXT, values: Kind = TEXT) -> dict[str, str]:
        value = self._get(key, dict, required=False) or {}
        for k, v in value.items():
            problem = control_problem(k) or names.problem(k)
            if problem:  # the key is what is wrong: named once, as the key
                msg = f"{self.where}: [{key}] key {shown(k)} {problem}"
                raise ConfigError(msg)
            if not isinstance(v, str):
                msg = f"{self.where}: '{key}.{k}' must be a string, got {shown(v)}"
                raise ConfigError(msg)
            values.check(v, self.where, f"{key}.{k}")
        return dict(value)

    def table(self, key: str) -> Table:
        value = self._get(key, dict, required=True)
        return Table(value, f"{self.where} [{key}]")
