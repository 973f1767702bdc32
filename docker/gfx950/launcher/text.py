"""The characters no value may hold, the longest value taken, and how a value is shown in a message.

Defined once, here, because this is the lowest place every checker can import: the launcher runs in
the image on the standard library alone and may import nothing of imagebuild, while imagebuild's own
checks (inputs.values for the Dockerfile, slurm for the sbatch script) may import the launcher. So the
launcher, a rendered Dockerfile and an sbatch script refuse exactly the same characters.
"""

from __future__ import annotations

import re
import unicodedata

# C0 and C1 controls and DEL (newline, CR, NUL, ESC ...), the Unicode line and paragraph separators,
# bidirectional marks, embeddings, overrides and isolates (U+202E makes text read differently than it
# runs) and lone surrogates (undecodable bytes of a command-line argument or environment variable).
CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
# No path, name, flag or tunable needs more; a longer value is a mistake or an attack on a log line.
MAX_VALUE_CHARS = 4096
SHOWN_CHARS = 80  # of a refused value, in its message

_CONTROL_NAMES = {
    "\n": "newline",
    "\r": "carriage return",
    "\t": "tab",
    "\x00": "NUL",
    "\x7f": "DEL",
    "\x1b": "ESC",
}


def control_character(value: str) -> str | None:
    """The first control character in ``value``, described ("U+202E (RIGHT-TO-LEFT OVERRIDE)"), or None."""
    found = CONTROL_RE.search(value)
    if not found:
        return None
    char = found[0]
    surrogate = 0xD800 <= ord(char) <= 0xDFFF
    name = "an undecodable byte" if surrogate else _CONTROL_NAMES.get(char) or unicodedata.name(char, "")
    return f"U+{ord(char):04X}{f' ({name})' if name else ''}"


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be passed on or printed as one line, or None: a control character (what to
    do: remove it), or its length (shorten it)."""
    char = control_character(value)
    if char:
        return f"contains a control character, {char}; remove it"
    if len(value) > MAX_VALUE_CHARS:
        return f"is {len(value)} characters long (at most {MAX_VALUE_CHARS})"
    return None


def shown(value: object) -> str:
    """``value`` for a one-line message: its repr (control characters escaped), cut when long."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."
