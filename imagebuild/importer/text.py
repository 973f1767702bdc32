"""Values from a manifest or an engine, made safe to print on a terminal or into a log.

A manifest on shared storage is written by whoever can write there: a newline in its ``origin``
would print a fake second line, an ESC sequence would rewrite the terminal, a bidi override would
show another text than the bytes. Standard library only, as the whole importer.
"""

from __future__ import annotations

BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
LIMIT = 200


def shown(value: str, limit: int = LIMIT) -> str:
    """``value`` with control and bidi characters escaped (``\\n``, ``\\x1b``, ``\\u202e``), cut to ``limit``."""
    out = "".join(
        char if char.isprintable() and char not in BIDI else char.encode("unicode_escape").decode("ascii")
        for char in value
    )
    return out if len(out) <= limit else f"{out[:limit]}... ({len(value)} characters)"
