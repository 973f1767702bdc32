"""An apt.lock.toml that agrees with a pins file, for tests that render a fully locked checkout."""

from __future__ import annotations

from pathlib import Path

from imagebuild.inputs.apt_lock import (
    AptArchitecture,
    AptLock,
    AptPackage,
    apt_lock_path_for,
    render_apt_lock,
)
from imagebuild.inputs.stages import load_stages
from imagebuild.pins import AptPin, load_pins
from tests import REPO

# What bookworm's step 4 really resolves to on a base that has none of them (a sample of it).
PACKAGES = (
    AptPackage(name="ca-certificates", version="20230311", sha256="a" * 64),
    AptPackage(name="curl", version="7.88.1-10+deb12u8", sha256="b" * 64),
    AptPackage(name="git", version="1:2.39.5-0+deb12u2", sha256="c" * 64),
    AptPackage(name="libc6", version="2.36-9+deb12u9", sha256="", in_base=True),
)


def apt_lock_for(pins_path: Path, packages: tuple[AptPackage, ...] = PACKAGES) -> AptLock:
    pins = load_pins(pins_path)
    pin = next(p for p in pins if isinstance(p, AptPin))
    assert pin.snapshot is not None
    stages = pins_path.parent / "stages"
    definition = load_stages(stages if stages.is_dir() else REPO / "stages")
    found = definition.apt_step()
    assert found is not None
    base = pins.image(definition.base_pin).platform_digest
    assert base is not None
    entry = AptArchitecture(
        architecture="amd64", base=base, requested=found[0].apt_packages, packages=packages
    )
    return AptLock(
        archive=pin.archive,
        suite=pin.suite,
        components=pin.components,
        snapshot=pin.snapshot,
        architectures=(entry,),
    )


def write_apt_lock(pins_path: Path, packages: tuple[AptPackage, ...] = PACKAGES) -> Path:
    path = apt_lock_path_for(pins_path)
    path.write_text(render_apt_lock(apt_lock_for(pins_path, packages)))
    return path
