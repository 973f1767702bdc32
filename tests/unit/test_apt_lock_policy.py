"""When lock resolves apt.lock.toml again, and that a failed resolution writes nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from imagebuild.errors import LockError
from imagebuild.inputs.apt_lock import AptArchitecture, AptPackage, apt_lock_path_for
from imagebuild.inputs.arch import load_arch
from imagebuild.inputs.stages import load_stages
from imagebuild.lock.apt_lock_file import lock_apt
from imagebuild.lock.apt_resolve import AptResolveError, AptResolveRequest
from imagebuild.pins import load_pins
from tests import REPO


class FakeResolver:
    """Answers as apt would for a base that lacks ccache; counts the resolutions."""

    def __init__(self, fail: AptResolveError | None = None) -> None:
        self.asked: list[AptResolveRequest] = []
        self.fail = fail

    def resolve(self, request: AptResolveRequest) -> AptArchitecture:
        self.asked.append(request)
        if self.fail is not None:
            raise self.fail
        ccache = AptPackage(name="ccache", version=f"4.8-{request.snapshot[:8]}", sha256="1" * 64)
        packages = [ccache] if "ccache" in request.requested else []
        packages += [
            AptPackage(name=n, version="1.0-1", sha256="", in_base=True)
            for n in request.requested
            if n != "ccache"
        ]
        return AptArchitecture(
            architecture="amd64",
            base=request.base,
            requested=request.requested,
            packages=tuple(sorted(packages, key=lambda p: p.name)),
        )


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "stages", tmp_path / "stages")
    text = (REPO / "pins.toml").read_text().replace('digest = ""', f'digest = "sha256:{"ab" * 32}"')
    (tmp_path / "pins.toml").write_text(text.replace('snapshot = ""', 'snapshot = "20261101T000000Z"'))
    return tmp_path


def run(checkout: Path, resolver: FakeResolver, *, upgrade: bool = False, mode: str = "write") -> str:
    result = lock_apt(
        pins=load_pins(checkout / "pins.toml"),
        definition=load_stages(checkout / "stages"),
        arch=load_arch(checkout / "stages" / "arch", "gfx942"),
        upgrade=upgrade,
        mode=mode,  # type: ignore[arg-type]
        offline=False,
        resolver=resolver,
    )
    assert result is not None
    return result.status


def test_lock_writes_the_package_set_once_and_then_keeps_it_byte_for_byte(checkout: Path) -> None:
    resolver = FakeResolver()
    assert run(checkout, resolver) == "resolved"
    path = apt_lock_path_for(checkout / "pins.toml")
    written = path.read_bytes()
    assert b'name = "ccache"\nversion = "4.8-20261101"' in written
    assert run(checkout, resolver) == "kept"
    assert len(resolver.asked) == 1
    assert resolver.asked[0].image == f"rocm/vllm-dev@sha256:{'ab' * 32}"
    assert path.read_bytes() == written
    # -P apt asks again; the same answer leaves the file as it was.
    assert run(checkout, resolver, upgrade=True) == "unchanged"
    assert path.read_bytes() == written


def test_a_moved_snapshot_or_an_edited_package_list_resolves_again(checkout: Path) -> None:
    resolver = FakeResolver()
    run(checkout, resolver)
    pins = checkout / "pins.toml"
    pins.write_text(pins.read_text().replace("20261101T000000Z", "20261102T000000Z"))
    assert run(checkout, resolver) == "resolved"
    assert 'version = "4.8-20261102"' in apt_lock_path_for(pins).read_text()
    stage = checkout / "stages" / "04-mori.toml"
    stage.write_text(stage.read_text().replace('"ccache", ', ""))
    assert run(checkout, resolver) == "resolved"
    assert "ccache" not in apt_lock_path_for(pins).read_text()
    assert len(resolver.asked) == 3


def test_check_mode_resolves_nothing_and_says_stale(checkout: Path) -> None:
    resolver = FakeResolver()
    assert run(checkout, resolver, mode="check") == "stale"
    assert resolver.asked == []
    assert not apt_lock_path_for(checkout / "pins.toml").exists()


def test_an_unlocked_base_or_snapshot_resolves_nothing(checkout: Path) -> None:
    pins = checkout / "pins.toml"
    pins.write_text(pins.read_text().replace("20261101T000000Z", ""))
    resolver = FakeResolver()
    assert run(checkout, resolver) == "unlocked"
    assert resolver.asked == []


def test_a_failed_resolution_is_one_line_naming_the_pin_and_writes_nothing(checkout: Path) -> None:
    resolver = FakeResolver()
    run(checkout, resolver)
    path = apt_lock_path_for(checkout / "pins.toml")
    before = path.read_bytes()
    failing = FakeResolver(fail=AptResolveError("snapshot X of jammy has no package ccache", "drop it"))
    with pytest.raises(LockError) as caught:
        run(checkout, failing, upgrade=True)
    message = str(caught.value)
    assert message.startswith("[apt] snapshot X of jammy has no package ccache; drop it;")
    assert "pins.toml and apt.lock.toml were left untouched" in message
    assert "\n" not in message
    assert path.read_bytes() == before
