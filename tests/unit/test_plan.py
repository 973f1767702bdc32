from __future__ import annotations

import json

import pytest

from imagebuild.cli import main


def plan(capsys: pytest.CaptureFixture[str], *args: str) -> list[int]:
    assert main(["plan", "--json", *args]) == 0
    return [row["step"] for row in json.loads(capsys.readouterr().out)["steps"]]


def test_plan_lists_eighteen_steps(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan(capsys) == list(range(1, 19))


def test_router_change_rebuilds_from_the_router_step_not_vllm(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan(capsys, "--changed", "router") == list(range(9, 19))


def test_mori_change_starts_at_step_4(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan(capsys, "--changed", "mori")[0] == 4


def test_base_change_rebuilds_everything_and_donor_only_the_graft(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan(capsys, "--changed", "base")[0] == 1
    assert plan(capsys, "--changed", "donor")[0] == 12


def test_plan_prints_only_the_table_and_explains_on_request(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["step", "instruction", "title", "pins"]
    assert len(out.splitlines()) == 1 + 18  # the header and one row per step: nothing else on stdout
    assert "vLLM fork, full source compile" in out
    assert main(["plan", "--explain"]) == 0
    assert "PIP_BUILD_CONSTRAINT" in capsys.readouterr().out
    assert main(["plan", "--json", "--explain"]) == 0
    assert "PIP_BUILD_CONSTRAINT" in json.loads(capsys.readouterr().out)["explanation"]


def test_locked_package_change_rebuilds_from_the_step_that_installs_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert plan(capsys, "--changed", "tqdm") == list(range(4, 19))
    # wcwidth is no declaration of any step: prettytable (step 4) pulls it in.
    assert plan(capsys, "--changed", "wcwidth")[0] == 4


def test_flydsl_change_keeps_the_vllm_compile(capsys: pytest.CaptureFixture[str]) -> None:
    """flydsl is installed once, after vLLM: nothing before the graft needs it (AITER is never imported)."""
    steps = plan(capsys, "--changed", "flydsl")
    assert steps == list(range(15, 19))
    assert steps[0] > 7


def test_build_dependency_change_rebuilds_from_the_constraint_step(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert plan(capsys, "--changed", "wheel")[0] == 3
    assert plan(capsys, "--changed", "setuptools")[0] == 3


def test_unknown_change_names_pins_and_packages(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--changed", "tqmd"]) == 2
    err = capsys.readouterr().err
    assert "Perhaps you meant 'tqdm'?" in err
    assert "packages: cmake, cython, flydsl, meson" in err
