"""The launcher recipes an arch's image carries, for planning a job on it.

The host's launcher plans the job with the recipes of the arch the image was built for: the
launcher's own, as the project's arch profile changes them (imagebuild.render.context), so a
gfx950 job knows its single-node tp8 variant. Without an arch (an image given by reference,
no record, no --arch) the launcher's own recipes are used, as they are.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from imagebuild.errors import ConfigError
from imagebuild.inputs.arch import load_arch
from imagebuild.project import Project, find_project
from imagebuild.render.context import arch_recipes


@contextmanager
def arch_recipes_dir(arch: str | None, *, starts: tuple[Path, ...], given_by: str) -> Iterator[Path | None]:
    """A directory holding ``arch``'s recipes (removed after), or None (no arch): the launcher's own.

    The profile is read from the project at or above the first of ``starts`` in one (a build
    record's directory, then the working directory: a record written outside the checkout, as
    `build --record` may, still plans with the checkout's profile). With none, planning with the
    launcher's own recipes could plan another arch's job: an error naming ``given_by`` (what said
    the arch: --arch, or the record).
    """
    if arch is None:
        yield None
        return
    project = next((found for start in starts if (found := _project_at(start)) is not None), None)
    if project is None:
        places = [str(s) for s in dict.fromkeys(starts)]
        where = (
            f"{places[0]} is in no project"
            if len(places) == 1
            else f"neither {' nor '.join(places)} is in a project"
        )
        msg = f"{given_by}: the image is {arch}'s, whose recipes come from a project's stages/arch/{arch}.toml, and {where}; run in the checkout or give it with -C DIR"
        raise ConfigError(msg)
    profile = load_arch(project.arch_dir, arch)
    with tempfile.TemporaryDirectory(prefix="imagebuild-recipes-") as directory:
        for name, text in arch_recipes(profile).items():
            (Path(directory) / name).write_text(text, encoding="utf-8")
        yield Path(directory)


def _project_at(start: Path) -> Project | None:
    try:
        return find_project(start)
    except ConfigError:
        return None
