"""A COPY from a pin that is not the donor stage's is refused when stages/ is loaded, before any render."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.errors import ConfigError
from imagebuild.inputs.stages import load_stages

GRAFT_STEP = "12-graft-aiter.toml"
WRONG_STAGE = "COPY from 'base': only the donor stage pin 'donor' is a stage"


def _copy_from_base(stages: Path) -> Path:
    step = stages / GRAFT_STEP
    text = step.read_text(encoding="utf-8")
    assert 'from = "donor"' in text
    step.write_text(text.replace('from = "donor"', 'from = "base"', 1), encoding="utf-8")
    return step


def test_the_donor_stage_is_the_one_copy_source(project: Path) -> None:
    definition = load_stages(project / "stages")
    assert {s.from_pin for s in definition.steps if s.from_pin} == {definition.spec.donor_pin}


def test_copy_from_another_pin_is_refused_at_load_naming_the_step_file(project: Path) -> None:
    step = _copy_from_base(project / "stages")
    with pytest.raises(ConfigError) as raised:
        load_stages(project / "stages")
    assert str(raised.value) == f"{step}: {WRONG_STAGE}"


@pytest.mark.parametrize("verb", [["plan"], ["render", "--allow-unpinned"]])
def test_every_verb_that_loads_stages_reports_it_as_bad_input(
    project: Path, capsys: pytest.CaptureFixture[str], verb: list[str]
) -> None:
    _copy_from_base(project / "stages")
    assert main(verb) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(f"{GRAFT_STEP}: {WRONG_STAGE}"), line
