"""Rendering the checkout's image for the render tests."""

from __future__ import annotations

from pathlib import Path

from imagebuild.project import find_project
from imagebuild.render import Dockerfile, RenderOptions, render_inputs
from tests import REPO


def rendered(root: Path = REPO, **options: object) -> Dockerfile:
    inputs = find_project(root).load("gfx942")
    opts = RenderOptions(**{"allow_unpinned": True, **options})  # type: ignore[arg-type]
    return render_inputs(inputs, opts)


def sample_dockerfile() -> Dockerfile:
    """The checkout's image rendered with the sample world's pins (as its builds are)."""
    inputs = find_project(REPO, REPO / "sampleworld" / "pins.toml").load("gfx942")
    return render_inputs(inputs, RenderOptions(allow_unpinned=True))


def final_stage(text: str) -> list[str]:
    """Instruction lines of the final stage (after the second FROM)."""
    instructions = [line for line in text.splitlines() if line and not line.startswith((" ", "#"))]
    froms = [i for i, line in enumerate(instructions) if line.startswith("FROM ")]
    return instructions[froms[1] :]
