"""Test doubles behind imagebuild's own interfaces: a fake engine that replays recorded builds, a fake
clock, and fake lock sources.

Not mocks: ``FakeEngine`` is an ``Engine`` like ``DockerEngine``, and its
builds replay streams recorded from a real classic builder (the sample-world
build; see tests/data/build_streams/ and the script there that records them),
translated by the same code the Docker engine uses; the images it builds save as
real ``docker save`` tars (``saved_image_tar``), whose layers the SBOM reads. ``FakeClock`` is a
``Clock`` whose timers fire when the test advances time, so a replay that
reaches a recorded pause fires the heartbeats a real build would, at once.
``FakeSources`` is the lock's ``Sources`` like ``RemoteSources``, answering
from a table, so lock's policy is tested with no git daemon, registry or HTTP
server (as pip-tools' ``FakeRepository``).

It lives in the package, not under tests/, so any test imports it the same
way whatever pytest's rootdir and import mode are.
"""

from imagebuild.testing.archives import image_info, image_root_files, layer_tar, saved_image_tar
from imagebuild.testing.clock import FakeClock
from imagebuild.testing.engine import FakeEngine, RecordedMessage, Recording
from imagebuild.testing.ports import EPHEMERAL_RANGE, dev_tool, free_port
from imagebuild.testing.sources import FakeSources

__all__ = [
    "EPHEMERAL_RANGE",
    "FakeClock",
    "FakeEngine",
    "FakeSources",
    "RecordedMessage",
    "Recording",
    "dev_tool",
    "free_port",
    "image_info",
    "image_root_files",
    "layer_tar",
    "saved_image_tar",
]
