"""The archive a registry-less job imports, read where the submitter sees it: the nodes must see it at
the same absolute path (shared storage), and each runs the importer `imagebuild export` wrote beside it.

The manifest is checked by the importer's own reader (its "kind" too: which runtimes can run it), so a
job is never written for a manifest the nodes would refuse.
"""

from __future__ import annotations

from pathlib import Path

from imagebuild.distribute.local_import import check_manifest
from imagebuild.distribute.shipped_importer import IMPORTER_NAME
from imagebuild.errors import ConfigError
from imagebuild.slurm.job import ArchivedImage


def read_archive(manifest: Path) -> ArchivedImage:
    path = manifest.absolute()
    checked = check_manifest(path)
    for name, what in ((checked.archive, "the archive"), (IMPORTER_NAME, "the importer")):
        if not (path.parent / name).is_file():
            msg = f"--archive {manifest}: {what} {path.parent / name} is missing beside it; export the image again"
            raise ConfigError(msg)
    return ArchivedImage(
        manifest=str(path), importer=str(path.parent / IMPORTER_NAME), image_id=checked.image_id,
        manifest_digest=checked.manifest_digest, kind=checked.kind, archive=str(path.parent / checked.archive),
    )  # fmt: skip
