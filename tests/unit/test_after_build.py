"""What build does after the engine built the image: the cache tag, and when the last result is reused."""

from __future__ import annotations

import errno
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagebuild.cli import main
from imagebuild.errors import ExitCode, NormalizeError
from imagebuild.normalize import core as normalize_core
from imagebuild.normalize.after_build import (
    Normalization,
    cache_from,
    cache_tag,
    layer_plan,
    normalize_build,
    previous_normalization,
)
from imagebuild.normalize.model import RULES
from imagebuild.testing import FakeEngine, image_info
from tests.unit.render_support import sample_dockerfile


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("imagebuild/kimi-k3:gfx942", "imagebuild/kimi-k3:gfx942-cache"),
        ("imagebuild/kimi-k3", "imagebuild/kimi-k3:latest-cache"),
        ("127.0.0.1:5000/kimi-k3", "127.0.0.1:5000/kimi-k3:latest-cache"),  # a registry port is no tag
        ("127.0.0.1:5000/kimi-k3:v1", "127.0.0.1:5000/kimi-k3:v1-cache"),
    ],
)
def test_cache_tag(tag: str, expected: str) -> None:
    assert cache_tag(tag) == expected


REPO = Path(__file__).resolve().parents[2]
BUILT, NORMALIZED, OTHER = ("sha256:" + c * 64 for c in "abc")


def record(path: Path, *, built: str = BUILT, image: str = NORMALIZED, rules: int = RULES) -> Path:
    normalization = {"unnormalized_id": built, "engine_id": image, "rules": rules}
    path.write_text(json.dumps({"image_id": image, "normalization": normalization}))
    return path


def normalize_sample(engine: FakeEngine, record_path: Path, *, keep_cache_image: bool = True) -> Normalization:
    """normalize_build of BUILT, tagged as the sample image, with the record at ``record_path``."""
    return normalize_build(
        engine,
        BUILT,
        tag="imagebuild/kimi-k3:gfx942",
        base_ref="base@sha256:0",
        dockerfile=sample_dockerfile(),
        spool_dir=record_path.parent,
        record_path=record_path,
        keep_cache_image=keep_cache_image,
    )


def test_a_fully_cached_build_reuses_the_last_normalised_image(tmp_path: Path) -> None:
    engine = FakeEngine(images=[image_info(BUILT), image_info(NORMALIZED)])
    result = normalize_sample(engine, record(tmp_path / "record.json"))
    assert (result.image_id, result.result.reused) == (NORMALIZED, True)
    assert engine.tags == {"imagebuild/kimi-k3:gfx942-cache": BUILT}  # the layer cache stays reachable
    assert engine.loads == 0


def test_drop_cache_image_removes_the_built_image_once_normalised(tmp_path: Path) -> None:
    engine = FakeEngine(images=[image_info(BUILT), image_info(NORMALIZED)])
    result = normalize_sample(engine, record(tmp_path / "record.json"), keep_cache_image=False)
    assert result.image_id == NORMALIZED
    assert engine.tags == {}
    assert engine.image_ids() == {NORMALIZED}  # the build's layers are kept once
    assert "removed (--drop-cache-image): the next build starts cold" in result.summary()


def test_drop_cache_image_keeps_the_built_image_when_normalisation_fails(tmp_path: Path) -> None:
    engine = FakeEngine(
        images=[
            replace(image_info(BUILT), layers=("sha256:1", "sha256:9")),
            replace(image_info("base"), tags=("base@sha256:0",), layers=("sha256:1", "sha256:2")),
        ]
    )
    with pytest.raises(NormalizeError):
        normalize_sample(engine, tmp_path / "record.json", keep_cache_image=False)
    assert engine.tags["imagebuild/kimi-k3:gfx942-cache"] == BUILT  # the only copy of the build stays


def test_drop_cache_image_needs_normalisation_before_the_engine_is_asked(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["-C", str(REPO), "build", "--drop-cache-image", "--no-normalize"])
    assert code == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    assert "--drop-cache-image with --no-normalize" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "recorded",
    [
        {"built": OTHER},  # the last build normalised another image
        {"image": OTHER},  # its result is no longer in the engine
        {"rules": RULES - 1},  # made under other normalisation rules: another image today
    ],
)
def test_nothing_is_reused_unless_it_is_this_image_and_still_there(
    tmp_path: Path, recorded: dict[str, Any]
) -> None:
    engine = FakeEngine(images=[image_info(BUILT), image_info(NORMALIZED)])
    assert previous_normalization(record(tmp_path / "r.json", **recorded), BUILT, engine) is None
    assert previous_normalization(tmp_path / "missing.json", BUILT, engine) is None


def test_a_built_image_that_does_not_sit_on_its_base_is_refused() -> None:
    engine = FakeEngine(
        images=[
            replace(image_info(BUILT), layers=("sha256:1", "sha256:9")),
            replace(image_info("base"), tags=("base@sha256:0",), layers=("sha256:1", "sha256:2")),
        ]
    )
    with pytest.raises(NormalizeError, match="does not start with the layers of its base base@sha256:0"):
        layer_plan(engine, BUILT, "base@sha256:0", sample_dockerfile())


def test_a_build_the_cache_image_served_entirely_reuses_the_last_normalised_image(tmp_path: Path) -> None:
    """--cache-normalized: a fully cached build gives the cache image itself, which the record names."""
    cache = OTHER
    path = record(tmp_path / "record.json")
    document = json.loads(path.read_text())
    document["normalization"]["cache_image"] = cache
    path.write_text(json.dumps(document))
    assert previous_normalization(path, cache, FakeEngine(images=[image_info(NORMALIZED)])) == (NORMALIZED, NORMALIZED)
    engine = FakeEngine(images=[image_info(cache), image_info(NORMALIZED)])
    result = normalize_build(
        engine,
        cache,
        tag="imagebuild/kimi-k3:gfx942",
        base_ref="base@sha256:0",
        dockerfile=sample_dockerfile(),
        spool_dir=tmp_path,
        record_path=path,
        cache_normalized=True,
    )
    assert (result.image_id, result.result.reused, result.result.cache_image) == (NORMALIZED, True, cache)
    assert engine.tags == {"imagebuild/kimi-k3:gfx942-cache": cache}
    assert engine.loads == 0


@pytest.mark.parametrize("other", ["--drop-cache-image", "--no-normalize"])
def test_cache_normalized_with_a_build_that_keeps_no_cache_is_refused_before_the_engine_is_asked(
    other: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["-C", str(REPO), "build", "--cache-normalized", other])
    assert code == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    assert f"--cache-normalized with {other}" in err
    assert len(err.strip().splitlines()) == 1


def test_a_build_names_in_cache_from_only_the_cache_image_its_record_names(tmp_path: Path) -> None:
    """Without that record's notes, the layers the image gives back could not be taken as they are."""
    path = record(tmp_path / "record.json")
    assert cache_from(FakeEngine(images=[image_info(OTHER)]), path) == ()  # no cache image recorded
    document = json.loads(path.read_text())
    document["normalization"]["cache_image"] = OTHER
    path.write_text(json.dumps(document))
    assert cache_from(FakeEngine(images=[image_info(OTHER)]), path) == (OTHER,)
    assert cache_from(FakeEngine(images=[image_info(NORMALIZED)]), path) == ()  # removed since
    assert cache_from(FakeEngine(images=[image_info(OTHER)], manifest_ids=True), path) == ()  # containerd store
    assert cache_from(FakeEngine(images=[image_info(OTHER)]), tmp_path / "none.json") == ()


def on_its_base() -> FakeEngine:
    return FakeEngine(
        images=[
            replace(image_info(BUILT), layers=("sha256:1", "sha256:9")),
            replace(image_info("base"), tags=("base@sha256:0",), layers=("sha256:1",)),
        ]
    )


def test_a_spool_on_a_full_disk_fails_normalisation_naming_the_file_and_keeps_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spooled = tmp_path / "layer-3.tar"

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(spooled))

    monkeypatch.setattr(normalize_core, "normalize_image", disk_full)
    with pytest.raises(NormalizeError) as raised:
        normalize_sample(on_its_base(), tmp_path / "record.json")
    assert str(raised.value) == (
        f"timestamp normalisation of {BUILT[:19]} failed: {spooled}: No space left on device; free some space "
        "there (or write elsewhere) and run it again. The built image is kept as imagebuild/kimi-k3:gfx942-cache; "
        "rebuild with --no-normalize to skip normalisation"
    )


def test_any_other_os_error_in_normalisation_is_a_bug_with_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def bug(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setattr(normalize_core, "normalize_image", bug)
    with pytest.raises(OSError, match="Bad file descriptor"):
        normalize_sample(on_its_base(), tmp_path / "record.json")
