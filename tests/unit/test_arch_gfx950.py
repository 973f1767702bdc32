"""The gfx950 (MI355X) profile: what its render, plan, recipe and slurm job are, from stages/arch/gfx950.toml.

The facts checked come from the reference's MI355X sibling (docs/arch-profiles.md): the donor by
digest, no flydsl re-pin, the AITER MLA kernel on, no int4 MoE requantisation, one node at TP 8,
40e9 bytes of KV cache. gfx942's rendering is checked unchanged by its golden tests.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.inputs.layout import CONTEXT_LAUNCHER
from imagebuild.launcher.plan import resolve_plan
from imagebuild.project import Inputs, find_project
from imagebuild.render import RenderOptions, render_inputs
from imagebuild.render.context import build_context
from tests import REPO

DONOR_DIGEST = "sha256:5aa7e626ff73672f5ca7aae46754570488c23d33ca1ac90756a1d2d1a3fe099b"
RECIPE = f"{CONTEXT_LAUNCHER}/recipes/kimi-k3.toml"
IMAGE = "127.0.0.1:5000/kimi-k3@sha256:" + "a" * 64


def _inputs(arch: str) -> Inputs:
    return find_project(REPO).load(arch)


def _text(arch: str) -> str:
    return render_inputs(_inputs(arch), RenderOptions(allow_unpinned=True)).text


def _recipe(arch: str) -> dict[str, object]:
    inputs = _inputs(arch)
    dockerfile = render_inputs(inputs, RenderOptions(allow_unpinned=True))
    context = build_context(dockerfile, inputs)
    data = next(f.data for f in context.files if f.path == RECIPE)
    return tomllib.loads(data.decode())


def test_donor_stage_is_the_mi355x_image_by_digest() -> None:
    text = _text("gfx950")
    assert f'ARG DONOR_MI355X_IMAGE="vllm/vllm-openai-rocm@{DONOR_DIGEST}"' in text
    assert "FROM ${DONOR_MI355X_IMAGE} AS proven_k3_aiter" in text
    # The grafted trees come from it, through its own ARGs.
    assert "COPY --from=proven_k3_aiter ${DONOR_MI355X_SITE_PACKAGES}/aiter_meta" in text
    assert "amdsiloai/vllm" not in text
    assert "DONOR_IMAGE" not in text


def test_no_flydsl_repin_and_steps_numbered_as_built() -> None:
    inputs = _inputs("gfx950")
    slugs = [s.slug for s in inputs.definition.steps]
    assert "flydsl-repin" not in slugs
    assert [s.number for s in inputs.definition.steps] == list(range(1, 18))
    text = _text("gfx950")
    assert "FLYDSL_REPIN" not in text
    assert "FLYDSL_VERSION" not in text
    assert "# [15/17] Check the graft and drop AITER JIT caches again" in text
    assert "# [17/17] Serve launcher and recipes" in text
    # The omitted step's pin is not the image's: no label claims a flydsl it does not carry.
    assert "io.imagebuild.pin.flydsl" not in text
    assert 'io.imagebuild.pin.donor"' not in text
    # The python lock still covers every arch's steps (one pylock.toml).
    assert "15-flydsl-repin" in inputs.all_steps.lock_groups()


def test_compile_targets_are_gfx950() -> None:
    text = _text("gfx950")
    for arg in ("MORI_ARCHS", "TARGET_ROCM_ARCH"):
        assert f'ARG {arg}="gfx950"' in text
    assert "gfx942" not in text.split("# Labels.")[0]


def test_gfx950_profile_steps_text_does_not_name_the_omitted_step() -> None:
    text = _text("gfx950")
    assert "# [14/17] Graft flydsl (the donor's, kept: no re-pin on gfx950)" in text
    assert "step 15 replaces" not in text


def test_plan_lists_the_profiles_steps(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--arch", "gfx950", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["arch"] == "gfx950"
    titles = [s["title"] for s in plan["steps"]]
    assert len(titles) == 17
    assert "flydsl over the graft" not in titles
    assert plan["steps"][11]["pins"] == ["base", "donor_mi355x"]


def test_committed_contexts_are_current(capsys: pytest.CaptureFixture[str]) -> None:
    for arch in ("gfx942", "gfx950"):
        assert main(["-C", str(REPO), "render", "--arch", arch, "--check"]) == 0, capsys.readouterr().err


def test_gfx950_recipe_is_the_mi355x_one() -> None:
    recipe = _recipe("gfx950")
    env = recipe["env"]
    assert isinstance(env, dict)
    assert env["VLLM_ROCM_USE_AITER_MLA"] == "1"
    assert env["GPU_ARCHS"] == "gfx950"
    assert env["KV_CACHE_MEMORY_BYTES"] == "40000000000"
    assert "AITER_SITUV2_A8W4" not in env  # the int4 SiTUv2 MoE path is gfx942's
    assert "--quantization-config" not in recipe["serve_flags"]  # type: ignore[operator]
    assert recipe["variants"] == {"tp8": {"ENABLE_EP": "0", "ALL2ALL_BACKEND": "none"}}
    assert recipe["inputs"] == {
        "NNODES": "1",
        "GPUS_PER_NODE": "8",
        "TP_SIZE": "8",
        "PP_SIZE": "1",
        "ENABLE_EP": "0",
        "ALL2ALL_BACKEND": "none",
    }


def test_gfx942_recipe_is_the_file_byte_for_byte() -> None:
    inputs = _inputs("gfx942")
    context = build_context(render_inputs(inputs, RenderOptions(allow_unpinned=True)), inputs)
    data = next(f.data for f in context.files if f.path == RECIPE)
    assert data == (REPO / "imagebuild/launcher/recipes/kimi-k3.toml").read_bytes()


def test_launcher_plans_the_tp8_variant_from_the_rendered_recipe() -> None:
    recipes = REPO / "docker/gfx950/launcher/recipes"
    env = {"MODEL_PATH": "/models/kimi-k3", "NODE_RANK": "0", "LAUNCHER_RECIPES_DIR": str(recipes)}
    plan = resolve_plan(env, variant_name="tp8")
    argv = list(plan.argv)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "8"
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "1"
    assert argv[argv.index("--nnodes") + 1] == "1"
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == "40000000000"
    assert "--quantization-config" not in argv
    assert "--headless" not in argv


def _slurm(*args: str) -> list[str]:
    return ["-C", str(REPO), "slurm", "--model-path", "/models/kimi-k3", "--image", IMAGE, *args]


def test_slurm_plans_the_gfx950_variant(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "job.sbatch"
    assert (
        main([*_slurm("--arch", "gfx950", "--nodes", "1", "--variant", "tp8", "-o", str(out)), "--json"]) == 0
    )
    job = json.loads(capsys.readouterr().out)
    assert (job["nodes"], job["variant"]) == (1, "tp8")
    script = out.read_text()
    assert "variant tp8, on 1 node (TP 8 x PP 1, 8 GPUs per node)" in script
    assert "    VARIANT=tp8\n" in script


def test_slurm_refuses_a_node_count_the_gfx950_variant_does_not_fill(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(_slurm("--arch", "gfx950", "--nodes", "2", "--variant", "tp8")) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--nodes 2 does not fit recipe kimi-k3 variant tp8" in line
    assert "use --nodes 1" in line


def test_slurm_without_arch_keeps_the_launchers_own_recipes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_slurm("--nodes", "1", "--variant", "tp8")) == 2
    assert "has no variant 'tp8'" in capsys.readouterr().err


def _gfx950_record(project: Path) -> Path:
    record = project / "build" / "gfx950.build.json"
    record.parent.mkdir(parents=True)
    record.write_text(
        json.dumps(
            {
                "image_id": "sha256:" + "cd" * 32,
                "tag": "imagebuild/kimi-k3:gfx950",
                "arch": "gfx950",
                "recipes": ["kimi-k3"],
                "published": [IMAGE],
            }
        )
    )
    return record


def test_slurm_from_a_gfx950_record_plans_with_its_recipes(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = _gfx950_record(project)
    job = ["slurm", "--nodes", "1", "--variant", "tp8", "--model-path", "/models/kimi-k3", "--json"]
    assert main([*job, "--from-record", str(record)]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["variant"] == "tp8"
    # A project directory with --arch reads that arch's record.
    assert main([*job, "--from-record", str(project), "--arch", "gfx950"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["image"] == IMAGE


def test_a_record_written_outside_the_checkout_plans_with_the_checkouts_profile(
    project: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """`build --record` may write anywhere (CI, the tests): its arch's profile is the working
    directory's project's, not the launcher's own recipes (which have no tp8)."""
    elsewhere = tmp_path_factory.mktemp("records")
    record = _gfx950_record(project)
    moved = record.rename(elsewhere / record.name)
    job = ["slurm", "--nodes", "1", "--variant", "tp8", "--model-path", "/models/kimi-k3", "--json"]
    assert main([*job, "--from-record", str(moved)]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["variant"] == "tp8"


def test_a_records_arch_without_a_project_is_one_line_not_another_arch_s_job(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    nowhere = tmp_path_factory.mktemp("nowhere")
    record = _gfx950_record(nowhere)
    monkeypatch.chdir(nowhere)
    out = nowhere / "job.sbatch"
    job = ["slurm", "--nodes", "1", "--variant", "tp8", "--model-path", "/models/kimi-k3", "-o", str(out)]
    assert main([*job, "--from-record", str(record)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line == (
        f"imagebuild: error: --from-record {record}: the image is gfx950's, whose recipes come from a "
        f"project's stages/arch/gfx950.toml, and neither {record.parent} nor {nowhere} is in a project; "
        "run in the checkout or give it with -C DIR"
    )
    assert not out.exists()
    assert main(["-C", str(REPO), *job, "--from-record", str(record)]) == 0  # -C names the checkout


def test_a_profile_without_a_donor_renders_no_donor_stage(project: Path) -> None:
    path = project / "stages/arch/gfx950.toml"
    text = path.read_text(encoding="utf-8")
    text = text.replace('donor = "donor_mi355x"', 'donor = ""', 1)
    text = text.replace(
        'omit_steps = ["flydsl-repin"]',
        'omit_steps = ["flydsl-repin", "graft-aiter", "graft-aiter_meta", "graft-flydsl"]',
        1,
    )
    text = text.split("# Step comments whose file text")[0]  # its step_text names omitted steps
    path.write_text(text, encoding="utf-8")
    inputs = find_project(project).load("gfx950")
    assert inputs.definition.spec.donor_pin is None
    rendered = render_inputs(inputs, RenderOptions(allow_unpinned=True)).text
    assert "AS proven_k3_aiter" not in rendered
    assert "--from=" not in rendered
    assert "DONOR" not in rendered
    assert "# [14/14] Serve launcher and recipes" in rendered
