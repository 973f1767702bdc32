"""imagebuild's Docker engine on another engine than the machine's: the engine matrix's, a node's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from imagebuild.engine.docker import DockerEngine


@contextlib.contextmanager
def engine_at(host: str) -> Iterator[DockerEngine]:
    """A client of the engine at ``host`` (a DOCKER_HOST value), with DOCKER_HOST naming it for the block:
    the verbs a test runs inside (``main([...])``) ask that engine too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DOCKER_HOST", host)
        client = DockerEngine.from_env()
        try:
            yield client
        finally:
            client.close()
