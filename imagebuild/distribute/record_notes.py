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
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: nested too deeply
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


PUBLISH_NAMES = (".publish.intoto.json", ".publish.dsse.json")  # publish's own statements, not the build's


def build_documents(path: Path | None, *, image_id: str, report: Callable[[str], None]) -> tuple[Path, ...]:
    """The SBOM, provenance and their envelopes the build record names, when it is ``image_id``'s record.

    What publish attaches to the pushed image and export writes beside the archive; () when there is
    no such record (said through ``report``). A file the record names but that is gone is reported
    and left out: the push or the export still stands.
    """
    if not image_id or path is None or not path.is_file():
        report(f"no build record of this image{f' at {path}' if path else ''}: its SBOM and provenance are not carried with it")
        return ()
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: nested too deeply
        report(f"build record {path} cannot be read ({e}): the SBOM and provenance are not carried with the image")
        return ()
    if not isinstance(record, dict) or record.get("image_id") != image_id:
        report(f"build record {path} describes another image: its SBOM and provenance are not carried with {image_id[:19]}")
        return ()
    named = record.get(ATTESTATIONS) or [record.get("sbom"), record.get("provenance")]
    found: list[Path] = []
    for entry in named if isinstance(named, list) else []:
        if not isinstance(entry, str) or entry.endswith(PUBLISH_NAMES):
            continue
        document = path.with_name(Path(entry).name)  # build writes them beside the record
        if document.is_file() and document not in found:
            found.append(document)
        elif not document.is_file():
            report(f"{document}: named by {path} but not there; it is not carried with the image")
    return tuple(found)
