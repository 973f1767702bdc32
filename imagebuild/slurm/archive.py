"""The archive a registry-less job imports: read its manifest where the submitter sees it.

The nodes must see the manifest at the same absolute path (shared storage); the importer that
`imagebuild export` writes next to it is what each node runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from imagebuild.errors import ConfigError
from imagebuild.slurm.job import ArchivedImage

IMPORTER_NAME = "imagebuild-import.py"


def read_archive(manifest: Path) -> ArchivedImage:
    path = manifest.absolute()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        msg = f"--archive {manifest}: not found; give the manifest (.json) `imagebuild export` wrote"
        raise ConfigError(msg) from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        msg = f"--archive {manifest}: cannot read the manifest ({e}); export the image again"
        raise ConfigError(msg) from None
    image_id = data.get("image_id") if isinstance(data, dict) else None
    if not isinstance(image_id, str):
        msg = f"--archive {manifest}: no image_id in the manifest; give the .json `imagebuild export` wrote"
        raise ConfigError(msg)
    importer = path.parent / IMPORTER_NAME
    if not importer.is_file():
        msg = f"--archive {manifest}: the importer {importer} is missing beside it; export the image again"
        raise ConfigError(msg)
    return ArchivedImage(manifest=str(path), importer=str(importer), image_id=image_id)
