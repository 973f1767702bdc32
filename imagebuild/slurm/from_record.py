"""`imagebuild slurm --from-record`: the image and the recipe of a job, read from the build record.

build writes the record (with the launcher recipes the image carries), publish appends the digest
reference it pushed (``published``), export the manifest it wrote (``exported``): so after either, the
job needs no reference typed again. A registry reference wins over an archive (a pull needs no shared
storage); --image or --archive choose otherwise. The values are checked as the flags' are: a record is
a file on disk, and a hand-edited one is bad input like any other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imagebuild.distribute.record_notes import EXPORTED, PUBLISHED
from imagebuild.errors import ConfigError
from imagebuild.inputs.layout import BUILD_DIR, DEFAULT_ARCH, build_record_path
from imagebuild.inputs.values import shown
from imagebuild.project import find_project
from imagebuild.slurm.archive import read_archive
from imagebuild.slurm.job import ArchivedImage, PulledImage
from imagebuild.slurm.values import check_image
from imagebuild.util.json_file import read_json_file

RECORD_HINT = f"{BUILD_DIR}/{DEFAULT_ARCH}.build.json"  # what `imagebuild build` writes, named in errors


@dataclass(frozen=True, kw_only=True)
class RecordedImage:
    """What a build record says a job runs: the image, and the recipes the image carries."""

    record: Path
    image: PulledImage | ArchivedImage
    recipes: tuple[str, ...]  # () from a record written before build recorded them
    chosen: str  # which of the record's entries the job uses, and why: shown once the job is written
    arch: str | None = None  # the arch profile the image was built for (its recipes are that arch's)


def record_path(given: Path, arch: str | None = None) -> Path:
    """RECORD as given: a build record file, or a project directory (its build/ARCH.build.json,
    gfx942's unless ``arch`` says another)."""
    if given.is_dir():
        return build_record_path(find_project(given.absolute()).root, arch or DEFAULT_ARCH)
    return given


def read_record(given: Path, arch: str | None = None) -> RecordedImage:
    path = record_path(given, arch)
    where = f"--from-record {path}"
    record = read_json_file(
        path, where=where, hint=f"name the build record `imagebuild build` wrote ({RECORD_HINT})",
        missing=f"no build record there; run `imagebuild build` first, or name the record it wrote ({RECORD_HINT})",
    )  # fmt: skip
    if not isinstance(record, dict) or "image_id" not in record:
        msg = f"{where}: not a build record (no image_id); name the record `imagebuild build` wrote ({RECORD_HINT})"
        raise ConfigError(msg)
    published, exported = _strings(record, PUBLISHED, where), _strings(record, EXPORTED, where)
    image: PulledImage | ArchivedImage
    if published:
        reference = published[-1]
        try:
            check_image(reference)
        except ConfigError as e:
            msg = (
                f"{where}: {PUBLISHED} {shown(reference)} is not a digest reference; publish the image again"
            )
            raise ConfigError(msg) from e
        image = PulledImage(reference=reference)
        also = f" (it was exported too: --archive {exported[-1]} imports that instead)" if exported else ""
        chosen = f"{path}: every node pulls {reference}, the reference publish recorded{also}"
    elif exported:
        try:
            image = read_archive(Path(exported[-1]))
        except ConfigError as e:
            msg = (
                f"{where}: {EXPORTED} {shown(exported[-1])} is no longer usable ({e}); export the image again"
            )
            raise ConfigError(msg) from e
        chosen = f"{path}: every node imports {exported[-1]}, the archive export recorded"
    else:
        msg = (
            f"{where}: the record names no published image and no exported archive; run "
            "`imagebuild publish -t HOST[:PORT]/REPO` or `imagebuild export -o DIR` first (or give --image or --archive)"
        )
        raise ConfigError(msg)
    recipes = tuple(_strings(record, "recipes", where))
    arch = record.get("arch")
    if arch is not None and not isinstance(arch, str):
        msg = f"{where}: arch is not a string; write the record again with the verb that made it"
        raise ConfigError(msg)
    return RecordedImage(record=path, image=image, recipes=recipes, chosen=chosen, arch=arch)


def _strings(record: dict[str, object], key: str, where: str) -> list[str]:
    value = record.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        msg = f"{where}: {key} is not a list of strings; write the record again with the verb that made it"
        raise ConfigError(msg)
    return list(value)


def recorded_recipe(given: str | None, recorded: RecordedImage, default: str) -> str:
    """--recipe when given (it must be one the image carries), else the record's one, else ``default``."""
    carried = recorded.recipes
    if given is not None:
        if carried and given not in carried:
            msg = f"--recipe {shown(given)}: the image of {recorded.record} carries no such recipe (it has {', '.join(carried)})"
            raise ConfigError(msg)
        return given
    if len(carried) == 1:
        return carried[0]
    if not carried or default in carried:
        return default
    msg = f"--from-record {recorded.record}: the image carries recipes {', '.join(carried)}; choose one with --recipe"
    raise ConfigError(msg)
