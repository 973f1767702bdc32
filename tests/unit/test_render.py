from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.errors import ConfigError, UnpinnedError
from imagebuild.pins import load_pins
from tests import REPO
from tests.unit.render_support import final_stage, rendered

STEP_KEYWORDS = ("FROM", "WORKDIR", "RUN", "COPY")


def test_golden_matches_committed_dockerfile() -> None:
    assert rendered().text == (REPO / "docker" / "gfx942.Dockerfile").read_text()


def test_rendering_is_deterministic_across_processes_and_hash_seeds() -> None:
    """Set and dict order must not leak into the Dockerfile: two interpreters, two hash seeds, one text."""
    texts = set()
    for seed in ("1", "4242"):
        done = subprocess.run(
            [sys.executable, "-m", "imagebuild", "-C", str(REPO), "render", "--allow-unpinned"],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
            timeout=60,
        )
        texts.add(done.stdout)
    assert texts == {rendered().text}


def test_final_stage_has_eighteen_steps_launcher_last() -> None:
    steps = [line for line in final_stage(rendered().text) if line.split()[0] in STEP_KEYWORDS]
    assert len(steps) == 18
    assert steps[0].startswith("FROM ${BASE_IMAGE}")
    assert steps[-1] == "COPY launcher/ /opt/imagebuild/launcher/"


def test_donor_stage_first_and_from_args_declared_before_it() -> None:
    lines = [line for line in rendered().text.splitlines() if line and not line.startswith("#")]
    first_from = next(i for i, line in enumerate(lines) if line.startswith("FROM"))
    assert lines[first_from] == "FROM ${DONOR_IMAGE} AS proven_k3_aiter"
    assert {line.split("=")[0] for line in lines[:first_from]} == {"ARG BASE_IMAGE", "ARG DONOR_IMAGE"}
    assert "ENTRYPOINT []" in final_stage(rendered().text)[1:3]


def test_locked_images_are_referenced_by_digest(project: Path) -> None:
    digest = "sha256:" + "ab" * 32
    text = (project / "pins.toml").read_text().replace('digest = ""', f'digest = "{digest}"')
    text = text.replace('sha256 = ""', f'sha256 = "{"cd" * 32}"')
    (project / "pins.toml").write_text(text)
    out = rendered(project, allow_unpinned=False).text
    assert f'ARG BASE_IMAGE="rocm/vllm-dev@{digest}"' in out
    assert "UNPINNED" not in out


def test_every_git_source_is_checked_out_by_full_sha_and_verified() -> None:
    text = rendered().text
    pins = load_pins(REPO / "pins.toml")
    for name in ("mori", "vllm", "router"):
        prefix = name.upper()
        commit = pins.get(name).identity
        assert f'ARG {prefix}_COMMIT="{commit}"' in text
        assert f'checkout --quiet "${{{prefix}_COMMIT}}"' in text
        assert f'[ "$(git -C "/tmp/{name}" rev-parse HEAD)" = "${{{prefix}_COMMIT}}" ]' in text


def test_downloads_are_verified_with_sha256sum() -> None:
    text = rendered().text
    assert 'echo "${AITER_WHEEL_SHA256}  /tmp/aiter/${AITER_WHEEL_FILE}" | sha256sum -c -' in text
    assert text.count('echo "${FLYDSL_SHA256}  /tmp/flydsl/${FLYDSL_FILE}" | sha256sum -c -') == 2


def test_pin_args_declared_just_before_first_consumer() -> None:
    text = rendered().text
    router_arg = text.index("ARG ROUTER_COMMIT=")
    assert text.index("[9/18]") < router_arg < text.index("[10/18]")
    assert text.index("[4/18]") < text.index("ARG MORI_COMMIT=") < text.index("[5/18]")


def test_nothing_the_classic_builder_cannot_parse() -> None:
    text = rendered().text
    assert "<<" not in text
    assert "--mount" not in text
    assert not re.search(r"--(chmod|link)", text)
    assert not re.search(r"^#\s*syntax", text, re.MULTILINE)
    # No comment line inside a RUN continuation.
    lines = text.splitlines()
    for prev, line in itertools.pairwise(lines):
        if prev.endswith("\\"):
            assert not line.lstrip().startswith("#"), line


def test_unpinned_refused_naming_the_pin_and_lock() -> None:
    with pytest.raises(UnpinnedError, match=r"\[base\].*imagebuild lock"):
        rendered(allow_unpinned=False)


def test_allow_unpinned_is_loud() -> None:
    text = rendered().text
    assert "WARNING: UNPINNED, NOT REPRODUCIBLE" in text
    assert "donor (tag kimi-k3-mi325x-release-v2)" in text


def test_build_arg_overrides_only_tunables() -> None:
    assert 'ARG MAX_JOBS="8"' in rendered(build_args={"MAX_JOBS": "8"}).text
    with pytest.raises(ConfigError, match=r"change pins\.toml instead"):
        rendered(build_args={"MORI_COMMIT": "0" * 40})
    with pytest.raises(ConfigError, match="Perhaps you meant 'MAX_JOBS'"):
        rendered(build_args={"MAX_JOB": "8"})


def test_image_ships_no_recipe_tuning_env() -> None:
    env_lines = [line for line in rendered().text.splitlines() if line.startswith(("ENV", "    "))]
    for banned in ("KV_CACHE", "CUDAGRAPH_MODE", "MORI_BACKEND", "ALLOC_CONF"):
        assert not any(banned in line for line in env_lines), banned
