"""Image-layout names in stage files: replaced by their paths at load time, never ARGs."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from imagebuild.errors import ConfigError
from imagebuild.inputs.layout import CHECK_TOOL, LAUNCHER_DIR, STAGE_NAMES, VERSIONS_FILE
from imagebuild.inputs.stage_model import Shell
from imagebuild.inputs.stages import load_stages
from imagebuild.project import find_project
from imagebuild.render import RenderOptions, render_inputs

REPO = Path(__file__).resolve().parents[2]


def test_stage_files_name_layout_paths_instead_of_repeating_them() -> None:
    for path in sorted((REPO / "stages").glob("[0-9]*.toml")):
        data = tomllib.loads(path.read_text())
        code = repr({k: v for k, v in data.items() if k not in ("title", "why")})
        for name, value in STAGE_NAMES.items():
            if name != "APP_DIR":  # "/app" is also a prefix of prose and other paths
                assert value not in code, f"{path.name}: write ${{{name}}} instead of {value}"


def test_layout_names_become_literal_paths() -> None:
    definition = load_stages(REPO / "stages")
    shell = [c.text for s in definition.steps for c in s.commands if isinstance(c, Shell)]
    assert f'echo "MORI_REF=${{MORI_COMMIT}}" >> {VERSIONS_FILE}' in shell
    assert any(text.startswith(f"{CHECK_TOOL} require-version") for text in shell)
    assert definition.steps[-1].dest == f"{LAUNCHER_DIR}/"
    assert not any("${VERSIONS_FILE}" in text or "${CHECK_TOOL}" in text for text in shell)


def test_a_tunable_may_not_take_a_layout_name(project: Path) -> None:
    image = project / "stages" / "image.toml"
    image.write_text(image.read_text().replace("[args]\n", '[args]\nVERSIONS_FILE = "/tmp/x"\n'))
    with pytest.raises(ConfigError, match="'VERSIONS_FILE' is an image-layout name"):
        load_stages(project / "stages")


def test_a_misspelt_layout_name_gets_a_suggestion(project: Path) -> None:
    step = project / "stages" / "06-aiter-jit.toml"
    step.write_text(step.read_text().replace("${VERSIONS_FILE}", "${VERSION_FILE}"))
    inputs = find_project(project).load("gfx942")
    with pytest.raises(ConfigError, match="Perhaps you meant 'VERSIONS_FILE'"):
        render_inputs(inputs, RenderOptions(allow_unpinned=True))
