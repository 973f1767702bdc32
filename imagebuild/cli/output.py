"""What a verb prints for a machine: one JSON document on stdout, the same shape for every verb.

Every document, success or failure, starts with ``"schema_version": 1``; a script checks it before
reading the rest, and a later release that renames or drops a key raises it. Where a key was renamed
to the name other verbs use for the same thing (``seconds`` for a duration, ``step`` for a step's
number), the old key is kept beside it for one release (docs/commands.md, "Command-line grammar").
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

SCHEMA_VERSION = 1
SCHEMA_KEY = "schema_version"


def write_json(document: Mapping[str, Any]) -> None:
    """Print the document, its schema version first, as indented JSON and a newline on stdout."""
    if SCHEMA_KEY in document:
        msg = f"the document already has {SCHEMA_KEY!r}: write_json adds it, so every verb's is the same"
        raise AssertionError(msg)
    json.dump({SCHEMA_KEY: SCHEMA_VERSION, **document}, sys.stdout, indent=2)
    sys.stdout.write("\n")


def with_new_names(document: Mapping[str, Any], renames: Mapping[str, str]) -> dict[str, Any]:
    """The document with each old key's value also under its new name; the old key stays, for one release.

    Only the top level: a caller renames the keys of nested rows with a call per row.
    """
    added = {new: document[old] for old, new in renames.items() if old in document}
    return {**document, **added}
