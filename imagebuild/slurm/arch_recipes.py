"""The launcher recipes an arch's image carries, for planning a job on it.

The host's launcher plans the job with the recipes of the arch the image was built for: the
launcher's own, as the project's arch profile changes them (imagebuild.render.context), so a
gfx950 job knows its single-node tp8 variant. Without an arch (an image given by reference,
no record) the launcher's own recipes are used, as they are.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from imagebuild.errors import ConfigError
from imagebuild.inputs.arch import load_arch
from imagebuild.project import find_project
from imagebuild.render.context import arch_recipes


@contextmanager
def arch_recipes_dir(arch: str | None, *, start: Path, required: bool) -> Iterator[Path | None]:
    """A directory holding ``arch``'s recipes (removed after), or None: the launcher's own.

    The profile is read from the project at or above ``start``; with none there, ``required``
    (the arch was asked for with --arch) makes it an error, else the launcher's own recipes are used.
    """
    if arch is None:
        yield None
        return
    try:
        project = find_project(start)
    except ConfigError as e:
        if required:
            msg = f"--arch {arch}: its recipes come from the project's stages/arch/{arch}.toml, and {start} is in no project; run in the checkout or name a build record in it"
            raise ConfigError(msg) from e
        yield None
        return
    profile = load_arch(project.arch_dir, arch)
    with tempfile.TemporaryDirectory(prefix="imagebuild-recipes-") as directory:
        for name, text in arch_recipes(profile).items():
            (Path(directory) / name).write_text(text, encoding="utf-8")
        yield Path(directory)
