"""Where a built image went, noted in its build record: what `imagebuild slurm --from-record` reads back.

publish appends the digest reference it pushed to the record's ``published`` list (and its statement
to ``attestations``), export the absolute path of the manifest it wrote to ``exported``; each only when the record describes the very image (the
same identity), so a record never names another image's reference or archive. Noting is best-effort:
a missing, unreadable or other image's record is reported and left alone, and the push or the export
still stands.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from imagebuild.util.files import write_atomically

PUBLISHED = "published"  # digest references, oldest first
EXPORTED = "exported"  # absolute manifest paths, oldest first
ATTESTATIONS = "attestations"  # the statements (and envelopes) written for the image, by path


def note_in_record(
    path: Path | None, *, image_id: str, key: str, value: str, report: Callable[[str], None]
) -> Path | None:
    """Append ``value`` to the record's ``key`` list (once: an older equal entry moves last); the path, or None."""
    what = {PUBLISHED: "the reference", EXPORTED: "the archive", ATTESTATIONS: "the statement"}[key]
    if not image_id:
        report(f"{what} is not recorded: without the image's identity no build record can be matched to it")
        return None
    if path is None or not path.is_file():
        report(f"no build record{f' at {path}' if path else ''}: {what} is not recorded")
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        report(f"build record {path} cannot be read ({e}): {what} is not recorded")
        return None
    if not isinstance(record, dict) or record.get("image_id") != image_id:
        described = record.get("image_id") if isinstance(record, dict) else None
        report(
            f"build record {path} describes image {described}, not {image_id}: {what} is not recorded there"
        )
        return None
    noted = record.get(key, [])
    earlier = [v for v in noted if isinstance(v, str) and v != value] if isinstance(noted, list) else []
    record[key] = [*earlier, value]
    write_atomically(path, json.dumps(record, indent=2) + "\n")
    return path
