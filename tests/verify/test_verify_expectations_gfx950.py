"""What verify expects of a gfx950 image, derived from stages/arch/gfx950.toml and the checkout's pins."""

from __future__ import annotations

import json
from pathlib import Path

from imagebuild.project import find_project
from imagebuild.verify.checks.support import probe_request
from imagebuild.verify.expectations import Expectations, build_expectations
from tests import REPO


def _expectations(arch: str) -> Expectations:
    return build_expectations(find_project(REPO).load(arch), image="img")


def test_no_repin_is_expected_and_no_flydsl_repin_line(in_repo: Path) -> None:
    exp = _expectations("gfx950")
    assert exp.arch == "gfx950"
    assert exp.graft.repinned is None
    assert exp.graft.tuned_configs == ("kimik3_a8w4_tuned_fmoe.csv", "kimik3_fp4_tuned_fmoe.csv")
    keys = [line.key for line in exp.versions.lines]
    assert "FLYDSL_REPIN" not in keys
    assert {"MORI_REF", "AITER_VERSION", "VLLM_REF", "AITER_GRAFT", "JIT_SCRUBBED"} <= set(keys)


def test_labels_are_the_arch_pins_only(in_repo: Path) -> None:
    labels = _expectations("gfx950").config.labels
    assert labels["io.imagebuild.arch"] == "gfx950"
    assert labels["io.imagebuild.pin.donor_mi355x"].startswith("sha256:5aa7e626")
    assert "io.imagebuild.pin.donor" not in labels
    assert "io.imagebuild.pin.flydsl" not in labels


def test_the_env_the_stages_set_carries_the_arch(in_repo: Path) -> None:
    env = _expectations("gfx950").config.env
    assert env["PYTORCH_ROCM_ARCH"] == "gfx950"
    assert env["MORI_GPU_ARCHS"] == "gfx950"


def test_launcher_case_is_the_single_node_head(in_repo: Path) -> None:
    exp = _expectations("gfx950")
    (head,) = exp.launcher_cases
    assert (head.env["NNODES"], head.env["TP_SIZE"], head.env["PP_SIZE"]) == ("1", "8", "1")
    assert "--port" in head.argv
    assert "--headless" not in head.argv
    assert '{"moe":{"weight":"int4_per_group_32"}}' not in head.argv
    assert "VLLM_ROCM_USE_AITER_MLA" in exp.config.banned_env_names
    assert "AITER_SITUV2_A8W4" not in exp.config.banned_env_names  # not in gfx950's recipe


def test_gfx942_keeps_its_repin_and_two_node_cases(in_repo: Path) -> None:
    exp = _expectations("gfx942")
    assert exp.graft.repinned == "flydsl"
    assert [c.name for c in exp.launcher_cases] == ["head", "worker"]
    assert "FLYDSL_REPIN" in [line.key for line in exp.versions.lines]


def test_json_round_trip_and_probe_request(in_repo: Path) -> None:
    exp = _expectations("gfx950")
    assert Expectations.from_json(json.loads(json.dumps(exp.to_json()))) == exp
    request = probe_request(exp)
    assert request["tuned_configs"] == exp.graft.tuned_configs
    assert [case["name"] for case in request["launcher_cases"]] == ["head"]
