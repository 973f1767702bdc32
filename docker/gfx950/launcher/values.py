"""Parsers for the launcher's raw input strings: each returns a typed value or raises one LauncherError
line naming the variable, the value (escaped and cut short) and what to do."""

from __future__ import annotations

import difflib
import json
import math
import re
import shlex
from collections.abc import Mapping, Sequence

from .messages import LauncherError
from .text import shown, text_problem

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")
# A name that becomes one path component (a log directory, a recipe file, a results file): it must
# stay inside its directory, so no separators, no `..`, nothing hidden.
_NAME_RE = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]*")
# A node address as the cluster scripts give it: a host name, IPv4 or IPv6 literal.
_ADDRESS_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:%-]*")
_BACKEND_RE = re.compile(r"[a-z0-9][a-z0-9_]*")


def given(environ: Mapping[str, str], name: str) -> str:
    """A submit-time value; empty counts as unset, as `${VAR:-default}` does in the cluster scripts."""
    return environ.get(name, "").strip()


def suggest(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f" Perhaps you meant {close[0]}?" if close else ""


def check_printable(name: str, value: str) -> str:
    """Refuse control and bidi characters and overlong values: a newline would split the
    one-line-per-element dry-run output and the log header, a U+202E would make a name read
    differently than it is, and no path, name or flag needs one."""
    problem = text_problem(value)
    if problem:
        msg = f"{name}={shown(value)} {problem} (in {name})"
        raise LauncherError(msg)
    return value


def check_option_value(name: str, value: str) -> str:
    """A printable value that vLLM's parser takes as the value of a flag: one starting with '-' would be
    read as a flag of its own (or make the flag before it lack its value)."""
    if check_printable(name, value).startswith("-"):
        msg = f"{name}={shown(value)} starts with '-', which vLLM would read as a flag: fix {name}"
        raise LauncherError(msg)
    return value


def parse_int(name: str, raw: str, *, low: int, high: int | None = None) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"in {low}..{high}"
        msg = f"{name}={shown(raw)} must be an integer {bounds}: fix {name}"
        raise LauncherError(msg)
    return value


def parse_float(name: str, raw: str, *, high: float | None = None) -> float:
    """A finite number > 0 (`inf` and `nan` are not durations)."""
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0) or (high is not None and value > high):
        bounds = "a finite number > 0" if high is None else f"a number in (0, {high:g}]"
        msg = f"{name}={shown(raw)} must be {bounds}: fix {name}"
        raise LauncherError(msg)
    return value


def parse_bool(name: str, raw: str) -> bool:
    word = raw.strip().lower()
    if word in TRUE_WORDS or word in FALSE_WORDS:
        return word in TRUE_WORDS
    msg = f"{name}={shown(raw)} is not a boolean: set {name} to 1 or 0"
    raise LauncherError(msg)


def parse_backend(raw: str) -> str | None:
    """An all-to-all backend's name (vLLM's and the fork's are lower-case words with '_'), or None."""
    word = raw.strip()
    if word.lower() in ("", "none"):
        return None
    if not _BACKEND_RE.fullmatch(word):
        msg = (f"ALL2ALL_BACKEND={shown(raw)} is not a backend name (lower-case letters, digits and '_', "
               "e.g. mori_low_latency): fix ALL2ALL_BACKEND or set it to none")  # fmt: skip
        raise LauncherError(msg)
    return word


def parse_choice(name: str, raw: str, choices: Sequence[str]) -> str:
    """One of a closed set of words, as vLLM's own parser would accept it."""
    if raw not in choices:
        msg = f"{name}={shown(raw)} is not one of {', '.join(choices)}: fix {name}.{suggest(raw, choices)}"
        raise LauncherError(msg)
    return raw


def parse_name(name: str, raw: str) -> str:
    """A value that names one file or directory inside a launcher-chosen directory."""
    if not _NAME_RE.fullmatch(raw) or ".." in raw:
        msg = (f"{name}={shown(raw)} must be a plain name (letters, digits, '.', '_', '+', '-'; no '/' or '..', "
               f"not starting with '.'): fix {name}")  # fmt: skip
        raise LauncherError(msg)
    return raw


def parse_address(name: str, raw: str) -> str:
    if not _ADDRESS_RE.fullmatch(raw):
        msg = f"{name}={shown(raw)} is not a host name or IP address: fix {name}"
        raise LauncherError(msg)
    return raw


def parse_addresses(name: str, raw: str) -> tuple[str, ...]:
    """Comma-separated node addresses, one per rank in rank order."""
    words = [word.strip() for word in raw.split(",")]
    if "" in words:
        msg = f"{name}={shown(raw)} has an empty entry: give one address per node, comma-separated, in rank order"
        raise LauncherError(msg)
    for word in words:
        if not _ADDRESS_RE.fullmatch(word):
            msg = f"{name}={shown(raw)}: {shown(word)} is not a host name or IP address: fix {name}"
            raise LauncherError(msg)
    return tuple(words)


def split_command(name: str, raw: str) -> tuple[str, ...]:
    """Words of a command-line input, never through a shell: a JSON array of strings, else POSIX
    shell words without expansion (a JSON argument then needs single quotes around it)."""
    text = raw.strip()
    if text.startswith("["):
        try:
            words = json.loads(text)
        except json.JSONDecodeError as error:
            msg = f"{name}={shown(raw)} starts with '[' but is not a JSON array ({error}): fix its JSON"
            raise LauncherError(msg) from error
        if not isinstance(words, list) or not all(isinstance(word, str) for word in words):
            msg = f"{name}={shown(raw)} must be a JSON array of strings: fix {name}"
            raise LauncherError(msg)
    else:
        try:
            words = shlex.split(text)
        except ValueError as error:
            msg = f"{name}={shown(raw)} cannot be split into words ({error}): check its quotes"
            raise LauncherError(msg) from error
    for word in words:
        problem = text_problem(word)
        if problem:
            msg = f"{name}={shown(raw)}: the word {shown(word)} {problem} (in {name})"
            raise LauncherError(msg)
    return tuple(words)
