"""What a verb prints on stdout: its text through ``write_text``; for a machine, one JSON document, the
same shape for every verb.

Every document, success or failure, starts with ``"schema_version": 1``; a script checks it before
reading the rest, and a later release that renames or drops a key raises it. Where a key was renamed
to the name other verbs use for the same thing (``seconds`` for a duration, ``step`` for a step's
number), the old key is kept beside it for one release (docs/commands.md, "Command-line grammar").
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from imagebuild.errors import ImageBuildError

SCHEMA_VERSION = 1
SCHEMA_KEY = "schema_version"


def closed_stdout_problem() -> str | None:
    """Hold descriptors 0-2 open, and say why output cannot go to a stdout that was closed (``>&-``).

    A closed one gets /dev/null: otherwise the next file opened takes its number, and a child
    (docker, git) would write its output into that file. A closed stderr then discards the
    messages, as the caller asked; a closed stdout is refused before the verb runs, since every
    verb's result goes there (Python left ``sys.stdout`` None, so the write would fail at the end).
    """
    for descriptor in (0, 1, 2):
        try:
            os.fstat(descriptor)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != descriptor:
                os.dup2(opened, descriptor)
                os.close(opened)
    if sys.stderr is None:
        sys.stderr = Path(os.devnull).open("w")  # noqa: SIM115  # for the rest of the process
    if sys.stdout is None:
        return "stdout is closed: imagebuild writes its result there; redirect it to /dev/null to discard it"
    return None


def stdout_to_devnull() -> None:
    """Point stdout's descriptor at /dev/null, so what is still buffered for it cannot fail again
    at exit (Python's "Exception ignored ... BrokenPipeError")."""
    with contextlib.suppress(OSError, ValueError):  # ValueError: a stdout without a descriptor
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def write_json(document: Mapping[str, Any]) -> None:
    """Print the document, its schema version first, as indented JSON and a newline on stdout."""
    if SCHEMA_KEY in document:
        msg = f"the document already has {SCHEMA_KEY!r}: write_json adds it, so every verb's is the same"
        raise AssertionError(msg)
    write_text(json.dumps({SCHEMA_KEY: SCHEMA_VERSION, **document}, indent=2) + "\n")


def write_text(text: str) -> None:
    """Write ``text`` on stdout, flushed: a full disk or a failing device behind stdout is one line
    (exit 1) when it happens, not a traceback, nor Python's "Exception ignored" at exit.

    A closed pipe stays a BrokenPipeError (``main``: exit 141, the reader stopped early).
    """
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        stdout_to_devnull()  # io.UnsupportedOperation is an OSError too: a stdout without a descriptor
        msg = f"could not write the output to stdout: {e.strerror or e}; free space there or redirect it elsewhere"
        raise ImageBuildError(msg) from e


def with_new_names(document: Mapping[str, Any], renames: Mapping[str, str]) -> dict[str, Any]:
    """The document with each old key's value also under its new name; the old key stays, for one release.

    Only the top level: a caller renames the keys of nested rows with a call per row.
    """
    added = {new: document[old] for old, new in renames.items() if old in document}
    return {**document, **added}
