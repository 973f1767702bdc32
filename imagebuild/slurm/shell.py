"""Shell words for the sbatch script: every value the job writes goes through these two."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

_EXPANDING = re.compile(r"[$`]")
_DOUBLE_QUOTED_SPECIAL = re.compile(r'([\\$`"])')


def quote(value: str | int) -> str:
    """``value`` as one literal shell word. shlex.quote's single quotes are literal too, but around a
    `$(` or a backtick shellcheck reads them as a mistake (SC2016, "expressions don't expand in
    single quotes"), and the script must pass it: such a value goes in double quotes, each of
    backslash, dollar, backtick and double quote escaped, which is the same literal."""
    text = str(value)
    if _EXPANDING.search(text):
        return '"' + _DOUBLE_QUOTED_SPECIAL.sub(r"\\\1", text) + '"'
    return shlex.quote(text)


def array(name: str, values: Iterable[str], indent: str = "    ") -> str:
    """A bash array assignment of literal words, on one line when it fits."""
    items = [quote(value) for value in values]
    if not items:
        return f"{indent}{name}=()"
    if sum(len(item) + 1 for item in items) + len(indent) + len(name) < 100:
        return f"{indent}{name}=({' '.join(items)})"
    body = "\n".join(f"{indent}    {item}" for item in items)
    return f"{indent}{name}=(\n{body}\n{indent})"
