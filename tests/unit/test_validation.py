"""Every bad input gives one line naming the file/key and what to do, and exit 2."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from imagebuild.cli import main


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def fails_with(capsys: pytest.CaptureFixture[str], *patterns: str, argv: tuple[str, ...] = ()) -> None:
    code = main(list(argv) or ["render", "--allow-unpinned"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("imagebuild: error: ")
    for pattern in patterns:
        assert pattern in lines[0], (pattern, lines[0])


CASES: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    "unknown pin key with suggestion": (
        lambda p: edit(p / "pins.toml", 'commit = "dafd', 'comit = "dafd'),
        ("pins.toml [mori]", "unknown key 'comit'", "Perhaps you meant 'commit'?"),
    ),
    "bad commit sha": (
        lambda p: edit(
            p / "pins.toml", 'commit = "dafdcfcf1e27b0c981b90903ab198b90d29e6867"', 'commit = "dafdcfc"'
        ),
        ("[mori]", "'commit' = 'dafdcfc' is not a valid 40-hex commit SHA", "imagebuild lock"),
    ),
    "impossible commit time": (
        lambda p: edit(p / "pins.toml", 'committed = "2026-07-16T13:10:47Z"', 'committed = "2026-13-01T00:00:00Z"'),
        ("[mori]", "'committed' = '2026-13-01T00:00:00Z' is not a valid UTC time", "imagebuild lock"),
    ),
    "commit time not in UTC": (
        lambda p: edit(p / "pins.toml", 'committed = "2026-07-16T13:10:47Z"', 'committed = "2026-01-01T00:00:00+02:00"'),
        ("[mori]", "is not a valid UTC time like '2026-01-01T00:00:00Z'"),
    ),
    "bad digest": (
        lambda p: edit(p / "pins.toml", 'digest = ""', 'digest = "sha256:xyz"'),
        ("[base]", "not a valid 'sha256:' + 64 hex digest"),
    ),
    "bad sha256": (
        lambda p: edit(p / "pins.toml", 'sha256 = "3ba78e6c', 'sha256 = "Zba78e6c'),
        ("[flydsl]", "not a valid 64-hex sha256"),
    ),
    "unknown pin kind": (
        lambda p: edit(p / "pins.toml", 'kind = "toolchain"', 'kind = "toolchian"'),
        ("[rust]", "unknown kind 'toolchian'", "Perhaps you meant 'toolchain'?"),
    ),
    "missing pin": (
        lambda p: edit(p / "pins.toml", "[router]", "[routr]"),
        ("no pin named 'router'", "Perhaps you meant 'routr'?"),
    ),
    "secret-like build tunable": (
        lambda p: edit(p / "stages" / "image.toml", "[args]\n", '[args]\nGH_TOKEN = ""\n'),
        ("ARG 'GH_TOKEN' refused: the name 'GH_TOKEN' looks like a secret",),
    ),
    "duplicate step": (
        lambda p: shutil.copy(p / "stages" / "09-router.toml", p / "stages" / "09-router-copy.toml"),
        ("duplicate step 9", "09-router.toml"),
    ),
    "unknown step key with suggestion": (
        lambda p: edit(p / "stages" / "06-aiter-jit.toml", "commands = [", "comands = ["),
        ("06-aiter-jit.toml", "unknown key 'comands'", "Perhaps you meant 'commands'?"),
    ),
    "pip from a shell string": (
        lambda p: edit(p / "stages" / "06-aiter-jit.toml", '"rm -rf', '"pip install foo", "rm -rf'),
        ("06-aiter-jit.toml commands[0]", "write it as { pip ="),
    ),
    "pip install without isolation choice": (
        lambda p: edit(p / "stages" / "06-aiter-jit.toml", '"rm -rf', '{ pip = "install foo" }, "rm -rf'),
        ("06-aiter-jit.toml", "build_isolation = true"),
    ),
    "undeclared variable with suggestion": (
        lambda p: edit(p / "stages" / "06-aiter-jit.toml", "${AITER_VERSION}", "${AITER_VERSON}"),
        ("06-aiter-jit.toml", "${AITER_VERSON}", "Perhaps you meant 'AITER_VERSION'?"),
    ),
    "comment inside RUN": (
        lambda p: edit(p / "stages" / "06-aiter-jit.toml", '"rm -rf', '"# drop caches", "rm -rf'),
        ("comment",),
    ),
    # Every pip install is hash-locked from pylock.toml, a pinned wheel, or a source tree.
    "a package the lock lacks": (
        lambda p: edit(p / "stages" / "04-mori.toml", '"prettytable"]', '"prettytable", "requests"]'),
        ("04-mori.toml (step 4): installs 'requests'", "does not lock for this step", "imagebuild lock"),
    ),
    "a locked version the stage no longer accepts": (
        lambda p: edit(p / "stages" / "04-mori.toml", '"meson==0.64.0"', '"meson==1.0.0"'),
        ("04-mori.toml (step 4): installs 'meson==1.0.0'", "locks meson 0.64.0", "imagebuild lock"),
    ),
    "pip install of an index package by name": (
        lambda p: edit(
            p / "stages" / "06-aiter-jit.toml",
            '"rm -rf',
            '{ pip = "install --no-deps requests", build_isolation = true }, "rm -rf',
        ),
        (
            "06-aiter-jit.toml (step 6): pip installs 'requests' by name from the index, unlocked",
            "locked = true",
        ),
    ),
    "pip install of a requirements file": (
        lambda p: edit(
            p / "stages" / "06-aiter-jit.toml",
            '"rm -rf',
            '{ pip = "install -r /r.txt", build_isolation = true }, "rm -rf',
        ),
        ("06-aiter-jit.toml (step 6): pip install -r adds a package source",),
    ),
    "pip install of a wheel file without its hash": (
        lambda p: edit(
            p / "stages" / "06-aiter-jit.toml",
            '"rm -rf',
            '{ pip = "install /tmp/x.whl", build_isolation = true }, "rm -rf',
        ),
        ("06-aiter-jit.toml (step 6): pip installs the file '/tmp/x.whl' without a hash", "fetched = PIN"),
    ),
    "python_packages nothing installs": (
        lambda p: edit(p / "stages" / "04-mori.toml", '    { pip = "install", locked = true },\n', ""),
        ("04-mori.toml: python_packages are declared but no command installs them",),
    ),
    "a fetched wheel nobody fetched": (
        lambda p: edit(p / "stages" / "05-aiter.toml", '    { fetch = "aiter", into = "/tmp/aiter" },\n', ""),
        ("05-aiter.toml: pip installs the fetched 'aiter' wheel, but no earlier { fetch = \"aiter\" }",),
    ),
    "a locked install that says how it builds": (
        lambda p: edit(
            p / "stages" / "04-mori.toml",
            '{ pip = "install", locked = true }',
            '{ pip = "install", locked = true, build_isolation = true }',
        ),
        ("04-mori.toml commands[", "a locked install is of wheels", "remove build_isolation"),
    ),
    # ccache's settings for the compile cache are defined once: a stage asks for them.
    "a stage setting ccache's compile-cache variable itself": (
        lambda p: edit(p / "stages" / "07-vllm.toml", 'NVCC_THREADS = "${NVCC_THREADS}" }', 'NVCC_THREADS = "${NVCC_THREADS}", CCACHE_DIR = "/ccache" }'),
        ("07-vllm.toml commands[", "env.CCACHE_DIR is ccache's setting", "compile_cache = true"),
    ),
    "a compile cache on a pip that builds nothing": (
        lambda p: edit(p / "stages" / "04-mori.toml", '{ pip = "install", locked = true }', '{ pip = "install", locked = true, compile_cache = true }'),
        ("04-mori.toml commands[", "compile_cache = true is for a build from source"),
    ),
    "a compile-cache build that leaves ccache's directory": (
        lambda p: edit(p / "stages" / "07-vllm.toml", '"rm -rf /tmp/vllm ${CCACHE_DIR}"', '"rm -rf /tmp/vllm"'),
        ("07-vllm.toml: a compile_cache build leaves ccache's directory", 'add "rm -rf ${CCACHE_DIR}" after it'),
    ),
    "bad constraint": (
        lambda p: (p / "constraints" / "build.txt").write_text("setuptools<<80\n"),
        ("constraints/build.txt:1", "not a valid requirement"),
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input(case: str, project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mutate, patterns = CASES[case]
    mutate(project)
    fails_with(capsys, *patterns)


def test_unknown_arch_lists_known(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fails_with(capsys, "unknown arch 'gfx90a'", "Known arches: gfx942", argv=("render", "--arch", "gfx90a"))


def test_unpinned_render_names_pin(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fails_with(capsys, "[base]", "run `imagebuild lock`", argv=("render",))


def test_unknown_changed_pin(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fails_with(
        capsys,
        "'morri' is neither a pin nor a locked python package",
        "Perhaps you meant 'mori'?",
        argv=("plan", "--changed", "morri"),
    )


def test_render_check_detects_stale_file(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--check"]) == 0
    edit(project / "stages" / "02-workdir.toml", "/app holds", "/app keeps")
    assert main(["render", "--check"]) == 1
    captured = capsys.readouterr()
    assert "+# /app keeps" in captured.out
    assert "is stale" in captured.err
