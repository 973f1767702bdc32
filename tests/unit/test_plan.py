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


def test_plan_table_and_mechanism(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan"]) == 0
    out = capsys.readouterr().out
    assert "vLLM fork, full source compile" in out
    assert "PIP_BUILD_CONSTRAINT" in out
