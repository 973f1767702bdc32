"""Bad arch profiles: a step, donor, recipe or variant that does not exist, a variant that does not
fit the profile's GPUs per node. Each is one line naming the profile's file and key, exit 2, and
nothing rendered."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.cli import main

PROFILE = "stages/arch/gfx950.toml"


def _edit(project: Path, old: str, new: str) -> None:
    path = project / PROFILE
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


CASES = {
    "unknown step": (
        'omit_steps = ["flydsl-repin"]',
        'omit_steps = ["flydsl-repinn"]',
        "omit_steps names step 'flydsl-repinn', which stages/ does not have. Perhaps you meant 'flydsl-repin'?",
    ),
    "unknown donor": (
        'donor = "donor_mi355x"',
        'donor = "donor_mi350x"',
        "donor = 'donor_mi350x' is not an image pin of",
    ),
    "another arch's donor": (
        'donor = "donor_mi355x"',
        'donor = "donor"',
        "donor = 'donor' is not an image pin of",
    ),
    "no donor while the graft copies from it": (
        'donor = "donor_mi355x"',
        'donor = ""',
        'donor = "" (no donor stage), but 12-graft-aiter.toml copies from the donor stage',
    ),
    "unknown variant": (
        'drop_variants = ["pp2xtp8", "allgather", "moriep"]',
        'drop_variants = ["pp2xtp8", "allgather", "moriepp"]',
        "[recipes.kimi-k3]: drop_variants names variant 'moriepp', which recipe kimi-k3 does not have",
    ),
    "unknown recipe": (
        "[recipes.kimi-k3]\n",
        "[recipes.kimi-k4]\n",
        "[recipes.kimi-k4]: no launcher recipe 'kimi-k4' in",
    ),
    "variant wider than the node": (
        '[recipes.kimi-k3.variants.tp8]\nENABLE_EP = "0"',
        '[recipes.kimi-k3.variants.tp8]\nTP_SIZE = "16"\nENABLE_EP = "0"',
        "variants.tp8: TP 16 x PP 1 = 16 GPUs does not fit NNODES 1 x 8 GPUs per node = 8",
    ),
    "variant on nodes of another size": (
        "gpus_per_node = 8",
        "gpus_per_node = 4",
        "inputs: GPUS_PER_NODE=8, but the profile's gpus_per_node is 4",
    ),
    "re-pin of a pin the arch does not consume": (
        'repinned = ""',
        'repinned = "flydsl"',
        "[graft] repinned = 'flydsl' is not a pin of",
    ),
    "unset env the recipe does not set": (
        'unset_env = ["AITER_SITUV2_A8W4"]',
        'unset_env = ["AITER_SITUV2_A8W5"]',
        "[recipes.kimi-k3]: unset_env names 'AITER_SITUV2_A8W5', which recipe kimi-k3 does not set",
    ),
    "dropped serve flag the recipe does not pass": (
        'drop_serve_flags = ["--quantization-config"]',
        'drop_serve_flags = ["--quantisation-config"]',
        "[recipes.kimi-k3]: drop_serve_flags names '--quantisation-config', which recipe kimi-k3 does not pass",
    ),
    "variant on more nodes than its inputs": (
        '[recipes.kimi-k3.variants.tp8]\nENABLE_EP = "0"',
        '[recipes.kimi-k3.variants.tp8]\nNNODES = "2"\nENABLE_EP = "0"',
        "variants.tp8: TP 8 x PP 1 = 8 GPUs does not fit NNODES 2 x 8 GPUs per node = 16",
    ),
    "a tuned config given as a path": (
        "tuned_configs = [",
        'tuned_configs = ["../x.csv", ',
        "[graft]: tuned_configs entry '../x.csv' must be a file name (no path)",
    ),
    "step text of an omitted step": (
        "[step_text.graft-aiter]",
        "[step_text.flydsl-repin]",
        "[step_text.flydsl-repin] names a step this profile does not run",
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
@pytest.mark.parametrize("verb", [["render", "--allow-unpinned", "-o", "out"], ["plan"]])
def test_bad_profile_is_one_line_exit_2_nothing_rendered(
    project: Path, capsys: pytest.CaptureFixture[str], case: str, verb: list[str]
) -> None:
    old, new, says = CASES[case]
    _edit(project, old, new)
    assert main([verb[0], "--arch", "gfx950", *verb[1:]]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith(f"imagebuild: error: {project / PROFILE}"), line
    assert says in line, line
    assert captured.out == ""
    assert not (project / "out").exists()


def test_an_unknown_profile_key_is_named_with_a_suggestion(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _edit(project, "omit_steps =", "omit_step =")
    assert main(["render", "--arch", "gfx950", "--allow-unpinned", "-o", "out"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{project / PROFILE}: unknown key 'omit_step'. Perhaps you meant 'omit_steps'?" in line
    assert not (project / "out").exists()


def test_a_bad_gfx950_profile_leaves_gfx942_alone(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit(project, 'omit_steps = ["flydsl-repin"]', 'omit_steps = ["nope"]')
    assert main(["render", "--arch", "gfx942", "--check"]) == 0, capsys.readouterr().err


def test_a_pin_for_a_profile_that_does_not_exist(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pins = project / "pins.toml"
    text = pins.read_text(encoding="utf-8")
    pins.write_text(text.replace('arches = ["gfx950"]', 'arches = ["gfx905"]', 1), encoding="utf-8")
    assert main(["render", "--arch", "gfx942", "--allow-unpinned", "-o", "out"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{pins} [donor_mi355x]: arches names 'gfx905', which is no profile in stages/arch/." in line
    assert not (project / "out").exists()
