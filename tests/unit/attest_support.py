"""A fixed build record for the SBOM and provenance tests: the sample pins with every identity filled."""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from imagebuild.build.record import BuildRecord, FileDigest
from imagebuild.build.sbom import InstalledDistribution
from imagebuild.inputs.python_lock import PythonLock, read_python_lock
from imagebuild.pins import PinSet, parse_pins
from tests import REPO

IMAGE_ID = "sha256:" + "9" * 64
INPUTS = "sha256:" + "8" * 64
STARTED = datetime(2026, 11, 30, 11, 40, 5, tzinfo=UTC)
FINISHED = datetime(2026, 11, 30, 12, 1, 30, tzinfo=UTC)
INVENTORY = (
    InstalledDistribution(name="tqdm", version="4.70.1"),
    InstalledDistribution(name="flydsl", version="0.2.4"),
    InstalledDistribution(name="amd_aiter", version="0.1.19"),
    InstalledDistribution(name="amd-mori", version="1.2.2"),
    InstalledDistribution(name="pip", version="23.0.1"),
)


def pin_data() -> dict[str, Any]:
    data = tomllib.loads((REPO / "sampleworld" / "pins.toml").read_text())
    data["base"].update(digest="sha256:" + "1" * 64, platform_digest="sha256:" + "2" * 64)
    data["donor"].update(digest="sha256:" + "3" * 64, platform_digest="sha256:" + "3" * 64)
    data["aiter"].update(sha256="4" * 64, size=1234)
    data["apt"] = {  # the sample world has no apt pin yet: its snapshot stand-in serves no archive yet
        "kind": "apt",
        "archive": "http://127.0.0.1:55081/archive/debian",
        "suite": "bookworm",
        "components": ["main"],
        "signed_by": "/usr/share/keyrings/sampleworld-snapshots.gpg",
        "snapshot": "20260101T000000Z",
    }
    return data


def pins(data: dict[str, Any] | None = None) -> PinSet:
    return parse_pins(data or pin_data(), Path("sampleworld/pins.toml"))


def lock() -> PythonLock:
    found = read_python_lock(REPO / "sampleworld" / "pylock.toml")
    assert found is not None
    return found


FILES = (
    FileDigest(name="pins.toml", sha256="a" * 64),
    FileDigest(name="pylock.toml", sha256="b" * 64),
    FileDigest(name="stages/04-mori.toml", sha256="c" * 64),
    FileDigest(name="Dockerfile", sha256="d" * 64),
    FileDigest(name="build-context.tar", sha256="e" * 64),
)


def build_record(pinset: PinSet | None = None, *, pushed: str | None = None) -> BuildRecord:
    """The record of a build of the sample pins, as the goldens were made from."""
    tag = "imagebuild/kimi-k3:gfx942"
    return BuildRecord(
        image_id=IMAGE_ID,
        tag=tag,
        tags=[tag],
        arch="gfx942",
        labels={},
        pins=pinset or pins(),
        lock=lock(),
        inputs_digest=INPUTS,
        files=FILES,
        build_args={"MAX_JOBS": "2"},
        no_cache=False,
        network="host",
        source_date_epoch=1_700_000_000,
        tool_version="0.1.0",
        started=STARTED,
        finished=FINISHED,
        steps=[],
        total_seconds=(FINISHED - STARTED).total_seconds(),
        all_cached=False,
        normalization=None,
        log=Path("build/gfx942.build.log"),
        sbom=Path("build/gfx942.sbom.cdx.json"),
        provenance=Path("build/gfx942.provenance.intoto.json"),
        pushed=pushed,
    )
