"""Step 10's optional NIXL layer: chosen when the Dockerfile is rendered, refused with an unlocked
NIXL pin, and its sample stand-ins failing the way the real builds do without their dependency."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from imagebuild.cli import main
from sampleworld.layout import SOURCES_DIR

NIXL_PINS = ("ucx", "rixl", "rocshmem", "deepep", "googletest")


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _enable_in_profile(project: Path, arch: str) -> Path:
    profile = project / "stages" / "arch" / f"{arch}.toml"
    _edit(profile, "omit_steps =", 'args = { WITH_NIXL = "1" }\nomit_steps =')
    return profile


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert captured.out == ""
    return line


def test_with_nixl_0_renders_no_nixl_pin(project: Path) -> None:
    assert main(["render", "--arch", "gfx942", "--allow-unpinned", "-o", "out"]) == 0
    text = (project / "out" / "Dockerfile").read_text()
    assert 'ARG WITH_NIXL="0"' in text
    for name in NIXL_PINS:
        assert f"{name.upper()}_" not in text.split("[10/18]")[1].split("[11/18]")[0]


@pytest.mark.parametrize(("arch", "step"), [("gfx942", "[10/18]"), ("gfx950", "[10/17]")])
def test_the_profile_turns_the_layer_on_with_its_arch(project: Path, arch: str, step: str) -> None:
    _enable_in_profile(project, arch)
    assert main(["render", "--arch", arch, "--allow-unpinned", "-o", "out"]) == 0
    text = (project / "out" / "Dockerfile").read_text()
    layer = text.split(step)[1].split("\n# [")[0]
    assert 'ARG WITH_NIXL="1"' in layer
    assert 'ARG UCX_COMMIT="da3fac2afcb55df7605f619ee19b37f4505bd4e4"' in layer
    assert 'ARG ROCSHMEM_REPO="https://github.com/ROCm/rocm-systems.git"' in layer
    assert '"-DGPU_TARGETS=${GFX_COMPILATION_ARCH}"' in layer
    assert '"OFFLOAD_ARCH=--offload-arch=${GFX_COMPILATION_ARCH}"' in layer
    assert "sha256sum -c -" in layer
    assert "GOOGLETEST_TARBALL_SHA256" in layer
    assert f'ARG GFX_COMPILATION_ARCH="{arch}"' in text
    assert "PREFIX=/usr/local/ucx" in layer
    assert "PREFIX=/usr/local/RIXL/install" in layer


def test_with_nixl_1_and_an_unlocked_nixl_pin_renders_nothing(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _enable_in_profile(project, "gfx942")
    assert main(["render", "--arch", "gfx942", "-o", "out"]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"imagebuild: error: {project / 'pins.toml'}: no immutable identity yet for"), line
    assert "[deepep] (branch main)" in line
    assert "[googletest] (url of 1.14.0)" in line
    assert not (project / "out").exists()


def test_with_nixl_0_does_not_need_the_nixl_pins_locked(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render", "--arch", "gfx942", "-o", "out"]) == 2  # other pins are unlocked here too
    line = _one_error_line(capsys)
    assert "[deepep]" not in line, line
    assert "[googletest]" not in line, line


def test_build_arg_with_nixl_1_and_an_unlocked_pin_is_refused_before_the_engine(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")  # never reached
    assert main(["build", "--arch", "gfx942", "--build-arg", "WITH_NIXL=1"]) == 2
    line = _one_error_line(capsys)
    assert f"{project / 'pins.toml'}: no immutable identity yet for" in line, line
    assert "[deepep]" in line, line


def test_a_profile_arg_that_is_no_tunable(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = project / "stages" / "arch" / "gfx950.toml"
    _edit(profile, "omit_steps =", 'args = { WITH_NIX = "1" }\nomit_steps =')
    assert main(["render", "--arch", "gfx950", "--allow-unpinned", "-o", "out"]) == 2
    line = _one_error_line(capsys)
    assert f"{profile} [args]: 'WITH_NIX' is not a build tunable of" in line, line
    assert "Perhaps you meant 'WITH_NIXL'?" in line
    assert not (project / "out").exists()


def test_a_layer_enabled_by_no_tunable(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    step = project / "stages" / "10-nixl.toml"
    _edit(step, 'enabled_by = "WITH_NIXL"', 'enabled_by = "WITH_NIXLL"')
    assert main(["render", "--arch", "gfx942", "--allow-unpinned", "-o", "out"]) == 2
    line = _one_error_line(capsys)
    assert f"{step}: enabled_by = 'WITH_NIXLL' is not a tunable of" in line, line
    assert not (project / "out").exists()


def test_a_tarball_pin_whose_url_is_no_archive(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pins = project / "pins.toml"
    _edit(pins, "refs/tags/v1.14.0.tar.gz", "refs/tags/v1.14.0.zip")
    assert main(["render", "--arch", "gfx942", "--allow-unpinned", "-o", "out"]) == 2
    line = _one_error_line(capsys)
    assert f"{pins} [googletest]: 'url' ends in 'v1.14.0.zip', not a source archive" in line, line


# The stand-ins, built on the host with its cc/make/cmake (the sample base image has the same tools).


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "-s", *args], capture_output=True, text=True, check=False)


@pytest.fixture
def stand_ins(tmp_path: Path) -> Path:
    if not all(shutil.which(tool) for tool in ("make", "cc", "cmake")):
        pytest.fail("the NIXL stand-ins build with make, cc and cmake; install build-essential and cmake")
    shutil.copytree(SOURCES_DIR / "nixl", tmp_path / "src")
    return tmp_path


def test_rixl_stand_in_needs_ucx_installed(stand_ins: Path) -> None:
    src, ucx = stand_ins / "src", stand_ins / "ucx"
    done = _make("-C", str(src / "rixl"), "install", f"PREFIX={stand_ins / 'rixl'}", f"UCX_PREFIX={ucx}")
    assert done.returncode != 0
    assert f"RIXL: UCX not found under {ucx}" in done.stderr
    assert _make("-C", str(src / "ucx"), "install", f"PREFIX={ucx}").returncode == 0
    done = _make("-C", str(src / "rixl"), "install", f"PREFIX={stand_ins / 'rixl'}", f"UCX_PREFIX={ucx}")
    assert done.returncode == 0, done.stderr
    assert (stand_ins / "rixl" / "lib" / "libnixl.so").is_file()


def test_deepep_stand_in_needs_rocshmem_and_an_offload_arch(stand_ins: Path) -> None:
    src, shmem = stand_ins / "src", stand_ins / "rocshmem"
    deepep = [
        "-C",
        str(src / "deepep"),
        "install",
        f"PREFIX={stand_ins / 'deepep'}",
        f"ROCSHMEM_PREFIX={shmem}",
    ]
    done = _make(*deepep, "OFFLOAD_ARCH=--offload-arch=gfx950")
    assert done.returncode != 0
    assert f"DeepEP: rocSHMEM not found under {shmem}" in done.stderr
    project = src / "rocm-systems" / "projects" / "rocshmem"
    build = stand_ins / "build"
    unset = subprocess.run(
        ["cmake", "-S", str(project), "-B", str(build)], capture_output=True, text=True, check=False
    )
    assert unset.returncode != 0
    assert "rocSHMEM: GPU_TARGETS is not set" in unset.stderr
    shutil.rmtree(build)
    for argv in (
        [
            "cmake",
            "-S",
            str(project),
            "-B",
            str(build),
            f"-DCMAKE_INSTALL_PREFIX={shmem}",
            "-DGPU_TARGETS=gfx950",
        ],
        ["cmake", "--build", str(build), "--target", "install"],
    ):
        subprocess.run(argv, capture_output=True, check=True)
    assert (
        'ROCSHMEM_GPU_TARGETS "gfx950"' in (shmem / "include" / "rocshmem" / "rocshmem_config.h").read_text()
    )
    no_arch = _make(*deepep)
    assert no_arch.returncode != 0
    assert "DeepEP: no --offload-arch given" in no_arch.stderr
    done = _make(*deepep, "OFFLOAD_ARCH=--offload-arch=gfx950")
    assert done.returncode == 0, done.stderr
    assert b"gfx950" in (stand_ins / "deepep" / "lib" / "libdeep_ep.so").read_bytes()


def test_plan_changed_covers_the_nixl_pins_with_the_layer_on(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in NIXL_PINS:
        capsys.readouterr()
        assert main(["plan", "--changed", name, "--build-arg", "WITH_NIXL=1", "--json"]) == 0
        steps = [row["step"] for row in json.loads(capsys.readouterr().out)["steps"]]
        assert steps == list(range(10, 19)), (name, steps)


def test_plan_changed_names_the_arg_that_turns_a_layer_pin_on(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--changed", "deepep"]) == 2
    line = _one_error_line(capsys)
    assert (
        "'deepep' is consumed only by 10-nixl.toml's optional layer, off in this build (WITH_NIXL=0)" in line
    )
    assert "pass --build-arg WITH_NIXL=1" in line
