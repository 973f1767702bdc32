"""The `sample_world` pytest fixture: the loopback world that stands in for GitHub, Docker Hub and PyPI.

Use it from any test tree by importing it into a conftest (or the test module):

    from sampleworld_fixtures import sample_world  # noqa: F401  (registers the fixture)

It brings the world up through the package API (idempotent; the base image is cached by recipe, so only
a machine's first session runs debootstrap) and, at the end of the session, stops only the servers that
this session started: a world someone already had running is left as it was. The state dir defaults to
the repository's .sampleworld/; IMAGEBUILD_SAMPLEWORLD_STATE overrides it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sampleworld import World, down, up
from sampleworld.layout import DEFAULT_STATE_DIR


def sample_world_state_dir() -> Path:
    override = os.environ.get("IMAGEBUILD_SAMPLEWORLD_STATE")
    return Path(override) if override else DEFAULT_STATE_DIR


@pytest.fixture(scope="session")
def sample_world() -> Iterator[World]:
    """A running sample world with both images in its registry; see sampleworld.World for the fields."""
    world = up(sample_world_state_dir(), images=True)
    try:
        yield world
    finally:
        if world.started:
            down(world.state_dir, only=world.started)
