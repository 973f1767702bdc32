"""Expectations derived from a pins file, the banned-ENV logic and versions.txt parsing (no docker)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from imagebuild.errors import ConfigError
from imagebuild.project import find_project
from imagebuild.verify.checks import probe
from imagebuild.verify.checks.support import probe_request
from imagebuild.verify.expectations import (
    Expectations,
    build_expectations,
    is_banned_env,
    parse_versions,
    setuptools_specifier,
    substitute,
)
from imagebuild.verify.image_facts import BANNED_ENV_PATTERNS, NONEMPTY_LABELS


def _expectations(repo: Path, pins: Path) -> Expectations:
    return build_expectations(find_project(repo, pins).load("gfx942"), image="img")


def test_version_lines_carry_each_pins_identity(in_repo: Path, k3_pins: Path) -> None:
    pins = tomllib.loads(k3_pins.read_text())
    exp = _expectations(in_repo, k3_pins)
    lines = {line.key: line for line in exp.versions.lines}
    # The keys are the contract of the rendered Dockerfile; the values come from the pins file.
    assert lines["MORI_REF"].text == f"MORI_REF={pins['mori']['commit']}"
    assert lines["VLLM_REF"].text == f"VLLM_REF={pins['vllm']['commit']}"
    assert lines["VLLM_ROUTER_REF"].text == f"VLLM_ROUTER_REF={pins['router']['commit']}"
    assert lines["AITER_VERSION"].text == f"AITER_VERSION={pins['aiter']['version']}"
    assert lines["FLYDSL_REPIN"].text == f"FLYDSL_REPIN={pins['flydsl']['version']} (after proven_k3 graft)"
    assert lines["FLYDSL_REPIN"].pin == "flydsl"
    assert lines["AITER_GRAFT"].text.startswith("AITER_GRAFT=proven_k3")
    assert lines["JIT_SCRUBBED"].text.startswith("JIT_SCRUBBED: ")
    assert lines["JIT_SCRUBBED"].pin is None
    assert exp.versions.forbidden_text == ("WITH_NIXL build complete",)


def test_labels_are_pin_identities(in_repo: Path, k3_pins: Path) -> None:
    pins = tomllib.loads(k3_pins.read_text())
    exp = _expectations(in_repo, k3_pins)
    assert exp.config.labels["io.imagebuild.arch"] == "gfx942"
    assert exp.config.labels["io.imagebuild.pin.base"] == pins["base"]["digest"]
    assert exp.config.labels["io.imagebuild.pin.mori"] == pins["mori"]["commit"]
    assert exp.config.labels["io.imagebuild.pin.aiter"] == pins["aiter"]["sha256"]
    assert exp.config.labels["io.imagebuild.pin.rust"] == pins["rust"]["version"]
    assert not exp.config.unlocked_pins
    assert "org.opencontainers.image.revision" in NONEMPTY_LABELS  # set by the checkout, not the pins


def test_unlocked_pins_are_reported_not_guessed(in_repo: Path) -> None:
    exp = _expectations(in_repo, in_repo / "pins.toml")  # the checkout's pins: base/donor/aiter unlocked
    for name in ("base", "donor", "aiter"):
        assert f"io.imagebuild.pin.{name}" not in exp.config.labels
        assert "no immutable identity" in exp.config.unlocked_pins[name]


def test_env_python_and_constraint_from_inputs(in_repo: Path, k3_pins: Path) -> None:
    pins = tomllib.loads(k3_pins.read_text())
    exp = _expectations(in_repo, k3_pins)
    assert exp.config.workdir == "/app"
    assert exp.config.env["PIP_CONSTRAINT"] == "/etc/pip-constraints.txt"
    assert exp.config.env["UV_BUILD_CONSTRAINT"] == "/etc/pip-build-constraints.txt"
    assert exp.config.env["AITER_JIT_DIR"] == "/opt/vllm_cache/aiter_jit"
    assert exp.config.env["COMGR_CACHE_DIR"] == "/opt/vllm_cache/comgr"
    assert exp.config.env["PYTORCH_ROCM_ARCH"] == "gfx942"  # from the arch profile, through the distinct ARG
    assert "PATH" not in exp.config.env  # built on the base's PATH: not knowable from the inputs
    assert exp.python.version == pins["base"]["python"]
    assert exp.python.site_packages == pins["base"]["site_packages"]
    assert exp.python.repinned_version == pins["flydsl"]["version"]
    assert exp.constraint.setuptools_specifier == "<80"
    assert "setuptools<80" in exp.constraint.constraints


def test_launcher_cases_from_host_launcher(in_repo: Path, k3_pins: Path) -> None:
    exp = _expectations(in_repo, k3_pins)
    head, worker = exp.launcher_cases
    assert (head.env["NODE_RANK"], worker.env["NODE_RANK"]) == ("0", "1")
    assert "--port" in head.argv
    assert "--headless" not in head.argv
    assert "--headless" in worker.argv
    assert '{"moe":{"weight":"int4_per_group_32"}}' in head.argv  # one argv element
    assert "LAUNCHER_RECIPES_DIR" not in head.env


def test_json_round_trip(in_repo: Path, k3_pins: Path) -> None:
    exp = _expectations(in_repo, k3_pins)
    assert Expectations.from_json(json.loads(json.dumps(exp.to_json()))) == exp


def test_the_probe_is_handed_every_key_it_reads(in_repo: Path, k3_pins: Path) -> None:
    # probe.py runs in the image without imagebuild: all it knows comes from this one JSON argument.
    read = set(re.findall(r'exp\["(\w+)"\]', Path(probe.__file__).read_text(encoding="utf-8")))
    exp = _expectations(in_repo, k3_pins)
    request = json.loads(json.dumps(probe_request(exp)))
    assert read == set(request)
    assert request["site_packages"] == exp.python.site_packages
    assert request["versions_file"] == "/app/versions.txt"
    assert [case["name"] for case in request["launcher_cases"]] == ["head", "worker"]


@pytest.mark.parametrize(
    ("name", "banned"),
    [
        ("KV_CACHE_DTYPE", True),  # a recipe key
        ("KV_SOMETHING_NEW", True),  # pattern KV_*
        ("PREFILL_CUDAGRAPH_MODE", True),
        ("XYZ_MORI_BACKEND", True),
        ("PYTORCH_HIP_ALLOC_CONF", True),
        ("PYTORCH_CUDA_ALLOC_CONF", True),
        ("VLLM_ROCM_USE_AITER_NEWTHING", True),
        ("MORI_SHMEM_HEAP_SIZE", True),
        ("VLLM_USE_V1", True),  # a recipe key, no pattern
        ("PYTORCH_ROCM_ARCH", False),  # the build sets it
        ("MORI_GPU_ARCHS", False),
        ("PATH", False),
    ],
)
def test_banned_env(in_repo: Path, k3_pins: Path, name: str, banned: bool) -> None:
    exp = _expectations(in_repo, k3_pins)
    assert is_banned_env(name, exp.config.banned_env_names, BANNED_ENV_PATTERNS, exp.config.env) is banned


def test_build_env_is_never_banned() -> None:
    assert not is_banned_env("KV_X", ["KV_X"], ["KV_*"], {"KV_X": "1"})


def test_parse_versions() -> None:
    text = (
        "BUILD_SETUPTOOLS=79.0.1 (isolated build, pip 23.0.1, constraint setuptools<80)\n"
        "MORI_REF=abc\n\n  random noise\n"
        "FLYDSL_REPIN=0.2.4   (after proven_k3 graft)\n"
        "JIT_SCRUBBED: /root/.mori emptied\n"
    )
    assert parse_versions(text) == [
        ("BUILD_SETUPTOOLS", "79.0.1 (isolated build, pip 23.0.1, constraint setuptools<80)",
         "BUILD_SETUPTOOLS=79.0.1 (isolated build, pip 23.0.1, constraint setuptools<80)"),
        ("MORI_REF", "abc", "MORI_REF=abc"),
        ("FLYDSL_REPIN", "0.2.4 (after proven_k3 graft)", "FLYDSL_REPIN=0.2.4 (after proven_k3 graft)"),
        ("JIT_SCRUBBED", "/root/.mori emptied", "JIT_SCRUBBED: /root/.mori emptied"),
    ]  # fmt: skip


def test_substitute_and_specifier() -> None:
    assert substitute("${A}-${B}", {"A": "1", "B": "2"}) == "1-2"
    assert substitute("/x:${PATH}", {"A": "1"}) is None
    assert setuptools_specifier("# c\nsetuptools<80  # why\nwheel\nSetuptools>=60\n") == "<80,>=60"


def test_unreadable_recipe_is_a_config_error(in_repo: Path, k3_pins: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the launcher recipe"):
        build_expectations(find_project(in_repo, k3_pins).load("gfx942"), image="x", recipes_dir=tmp_path)
