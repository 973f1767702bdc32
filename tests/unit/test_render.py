from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.errors import UnpinnedError
from imagebuild.pins import load_pins
from imagebuild.project import find_project
from imagebuild.render.context import build_context, context_differences
from tests import REPO
from tests.unit.apt_support import write_apt_lock
from tests.unit.render_support import final_stage, rendered

STEP_KEYWORDS = ("FROM", "WORKDIR", "RUN", "COPY")


def test_committed_context_is_what_render_writes() -> None:
    """docker/gfx942/ holds exactly the rendered context: the Dockerfile and every file it COPYs."""
    inputs = find_project(REPO).load("gfx942")
    context = build_context(rendered(), inputs)
    assert context_differences(context, REPO / "docker" / "gfx942") == []
    assert context.dockerfile.startswith(rendered().text)


def test_rendering_is_deterministic_across_processes_and_hash_seeds() -> None:
    """Set and dict order must not leak into the Dockerfile: two interpreters, two hash seeds, one text."""
    texts = set()
    for seed in ("1", "4242"):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "imagebuild",
                "-C",
                str(REPO),
                "render",
                "--allow-unpinned",
                "--output",
                "-",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
            timeout=60,
        )
        texts.add(done.stdout)
    assert texts == {(REPO / "docker" / "gfx942" / "Dockerfile").read_text()}


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
    text = text.replace('committed = ""', 'committed = "2026-08-11T00:00:00Z"')
    text = text.replace('snapshot = ""', 'snapshot = "20261201T000000Z"')
    (project / "pins.toml").write_text(text)
    write_apt_lock(project / "pins.toml")  # step 4's packages, as lock writes them
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
    # ... and installed hash-checked by pip as well.
    assert '"/tmp/aiter/${AITER_WHEEL_FILE} --hash=sha256:${AITER_WHEEL_SHA256}"' in text


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


def test_image_ships_no_recipe_tuning_env() -> None:
    env_lines = [line for line in rendered().text.splitlines() if line.startswith(("ENV", "    "))]
    for banned in ("KV_CACHE", "CUDAGRAPH_MODE", "MORI_BACKEND", "ALLOC_CONF"):
        assert not any(banned in line for line in env_lines), banned


# Where the reference's steps 4 and 5 matter on real networks and bases --------------------------


def _step(text: str, number: int) -> str:
    start = text.index(f"# [{number}/18]")
    end = text.index(f"# [{number + 1}/18]") if number < 18 else len(text)
    return text[start:end]


def test_apt_goes_over_https_in_both_source_formats_before_apt_runs() -> None:
    mori = _step(rendered().text, 4)
    rewrite = (
        "for list in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; "
        'do if [ -f "$list" ]; then sed -i "s|http://|https://|g" "$list"; fi; done'
    )
    assert rewrite in mori
    assert mori.index(rewrite) < mori.index("apt-get update")


def test_every_mori_and_aiter_package_name_is_uninstalled_before_installing() -> None:
    text = rendered().text
    mori, aiter = _step(text, 4), _step(text, 5)
    uninstall_mori = "python3 -m pip uninstall -y amd_mori amd-mori amd-mori-nightly mori"
    assert uninstall_mori in mori
    assert mori.index(uninstall_mori) < mori.index("pip install --no-cache-dir --no-deps .")
    uninstall_aiter = "python3 -m pip uninstall -y amd_aiter amd-aiter aiter"
    assert uninstall_aiter in aiter
    assert aiter.index(uninstall_aiter) < aiter.index("--require-hashes")


def test_nixl_library_and_tool_paths_are_the_references() -> None:
    nixl = _step(rendered().text, 10)
    assert (
        'LD_LIBRARY_PATH="/usr/local/ucx/lib:/usr/local/lib:/usr/local/RIXL/install/lib:${LD_LIBRARY_PATH}"'
        in nixl
    )
    assert 'PATH="/usr/local/ucx/bin:${PATH}"' in nixl


def test_aiter_is_checked_by_metadata_and_file_list_never_imported() -> None:
    """The real AITER probes the GPU on import; build hosts have none."""
    text = rendered().text
    assert not re.search(r"import aiter|from aiter|import_module\(.aiter", text)
    aiter = _step(text, 5)
    assert "/opt/imagebuild/bin/imagebuild-check require-version amd-aiter ${AITER_VERSION}" in aiter
    assert "/opt/imagebuild/bin/imagebuild-check require-files amd-aiter aiter/ops/triton/conv/" in aiter
    assert "python3 -c 'import mori, mori.io, mori.ops'" in _step(text, 4)  # MoRI's import checks stay


def test_flydsl_is_installed_once_after_the_vllm_compile() -> None:
    text = rendered().text
    installs = [n for n in range(1, 19) if '"flydsl==' in _step(text, n)]
    assert installs == [15]


def test_the_steps_that_copy_the_build_context_are_marked_for_normalisation() -> None:
    """Their files' times come from the client (imagebuild's tar or the docker CLI): normalisation pins them.
    A COPY --from's come from the donor image, an input, and are only clamped."""
    definition = find_project(REPO).load("gfx942").definition
    from_stage = {step.number for step in definition.steps if step.from_pin is not None}
    marked = {s.number: s.copies_context for s in rendered().steps if s.instruction == "COPY"}
    assert from_stage
    assert set(marked) > from_stage
    assert marked == {number: number not in from_stage for number in marked}
