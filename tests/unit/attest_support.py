"""A fixed build record for the SBOM and provenance tests: the sample pins with every identity filled."""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from imagebuild.attest.image_contents import DebianPackage, ImageContents, OsRelease, PythonDistribution
from imagebuild.build.record import BuildRecord, FileDigest
from imagebuild.inputs.python_lock import PythonLock, read_python_lock
from imagebuild.pins import PinSet, parse_pins
from tests import REPO

IMAGE_ID = "sha256:" + "9" * 64
INPUTS = "sha256:" + "8" * 64
STARTED = datetime(2026, 11, 30, 11, 40, 5, tzinfo=UTC)
FINISHED = datetime(2026, 11, 30, 12, 1, 30, tzinfo=UTC)
SITE = "/usr/lib/python3/dist-packages"


def _dist(name: str, version: str, layer: int, *requires: str) -> PythonDistribution:
    return PythonDistribution(name=name, version=version, location=SITE, requires=requires, layer=layer)


def _deb(name: str, version: str, layer: int, *depends: tuple[str, ...], source: str = "") -> DebianPackage:
    return DebianPackage(name=name, version=version, architecture="amd64", source=source, depends=depends, layer=layer)


# What the image's layers hold: layer 0 is the base's, the others the build's.
CONTENTS = ImageContents(
    os=OsRelease(id="debian", version_id="12", pretty_name="Debian GNU/Linux 12 (bookworm)"),
    debian=(
        _deb("bash", "5.2.15-2+b2", 0, ("libc6",), ("base-files", "no-such-package")),
        _deb("base-files", "12.4+deb12u5", 0),
        _deb("libc6", "2.36-9+deb12u4", 0, source="glibc"),
    ),
    python=(
        _dist("tqdm", "4.70.1", 1),
        _dist("flydsl", "0.2.4", 1, "tqdm"),
        _dist("amd_aiter", "0.1.19", 1),
        _dist("amd-mori", "1.2.2", 1),
        _dist("pip", "23.0.1", 0),
    ),
    base_layers=1,
)


def pin_data() -> dict[str, Any]:
    data = tomllib.loads((REPO / "sampleworld" / "pins.toml").read_text())
    data["base"].update(digest="sha256:" + "1" * 64, platform_digest="sha256:" + "2" * 64)
    data["donor"].update(digest="sha256:" + "3" * 64, platform_digest="sha256:" + "3" * 64)
    data["aiter"].update(sha256="4" * 64, size=1234)
    data["deepep"].update(commit="7" * 40, committed="2026-01-01T02:00:00Z")
    data["googletest"].update(sha256="8" * 64, size=519)
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
