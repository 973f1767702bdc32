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
from typing import Any

from imagebuild.errors import ImageBuildError

SCHEMA_VERSION = 1
SCHEMA_KEY = "schema_version"


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
        # What is still buffered would fail again at exit: it goes to /dev/null (io.UnsupportedOperation,
        # an OSError and ValueError: a stdout without a descriptor, which has nothing to flush at exit).
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        msg = f"could not write the output to stdout: {e.strerror or e}; free space there or redirect it elsewhere"
        raise ImageBuildError(msg) from e


def with_new_names(document: Mapping[str, Any], renames: Mapping[str, str]) -> dict[str, Any]:
    """The document with each old key's value also under its new name; the old key stays, for one release.

    Only the top level: a caller renames the keys of nested rows with a call per row.
    """
    added = {new: document[old] for old, new in renames.items() if old in document}
    return {**document, **added}
