"""`imagebuild slurm --from-record`: the image and recipe come from the build record publish or export noted.

The script is a pure rendering, so the test is an equality: the script from a record is the script of the
same values passed by hand (--image, --archive, --recipe).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.distribute.compression import Compression
from imagebuild.distribute.export import ExportOptions, export_image
from imagebuild.distribute.publish import PublishOptions, publish_image
from imagebuild.project import find_project
from imagebuild.render import RenderOptions, render_inputs
from imagebuild.render.context import build_context
from imagebuild.testing import FakeEngine
from tests import REPO

IMAGE_ID = "sha256:" + "cd" * 32
REFERENCE = "127.0.0.1:5000/ml/kimi-k3@sha256:" + "ab" * 32
JOB = ["slurm", "--nodes", "2", "--variant", "pp2xtp8", "--model-path", "/models/kimi-k3"]
TAG = "imagebuild/kimi-k3:gfx942"


def write_record(path: Path, **keys: object) -> Path:
    """A build record as build wrote it (the keys slurm reads), plus what publish or export noted."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"image_id": IMAGE_ID, "tag": TAG, "arch": "gfx942", "recipes": ["kimi-k3"], **keys})
    )
    return path


def script(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = main([*JOB, *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def failure(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = main([*JOB, *args])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1
    return err


def test_the_published_reference_gives_the_script_of_image(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = write_record(
        tmp_path / "gfx942.build.json", published=["127.0.0.1:5000/old@sha256:" + "ef" * 32, REFERENCE]
    )
    assert script(capsys, "--from-record", str(record)) == script(
        capsys, "--image", REFERENCE, "--recipe", "kimi-k3"
    )


def test_a_record_of_publish_and_export_pulls_and_names_the_archive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = write_record(
        tmp_path / "r.json", published=[REFERENCE], exported=["/shared/images/x.tar.zst.json"]
    )
    assert main([*JOB, "--from-record", str(record)]) == 0
    out, err = capsys.readouterr()
    assert f"IMAGE={REFERENCE}\n" in out
    assert "it was exported too: --archive /shared/images/x.tar.zst.json imports that instead" in err


def test_publish_then_export_noted_in_the_record_are_what_slurm_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole path through the verbs' cores: the record notes are the ones publish and export write."""
    engine = FakeEngine()
    image_id = engine.add_saved_image(TAG, size=1 << 12)
    record = tmp_path / "build" / "gfx942.build.json"
    record.parent.mkdir()
    record.write_text(json.dumps({"image_id": image_id, "tag": TAG, "recipes": ["kimi-k3"]}))
    exported = export_image(
        ExportOptions(
            image=TAG, output=tmp_path / "shared", compression=Compression.GZIP, record_path=record
        ),
        engine,
        report=lambda _: None,
    )
    assert exported.recorded_in == record
    assert json.loads(record.read_text())["exported"] == [str(exported.manifest_path)]
    by_hand = script(capsys, "--archive", str(exported.manifest_path))
    assert script(capsys, "--from-record", str(record)) == by_hand
    published = publish_image(
        PublishOptions(image=TAG, repository="127.0.0.1:5000/ml/kimi-k3", record_path=record, attach=False),
        engine,
        report=lambda _: None,
    )
    assert script(capsys, "--from-record", str(record)) == script(capsys, "--image", published.reference)


def test_without_a_value_the_projects_record_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "team-image"
    assert main(["init", str(project), "-q"]) == 0
    capsys.readouterr()
    write_record(project / "build" / "gfx942.build.json", published=[REFERENCE])
    by_hand = script(capsys, "--image", REFERENCE)
    monkeypatch.chdir(project / "stages")
    assert script(capsys, "--from-record") == by_hand
    monkeypatch.chdir(tmp_path)
    assert script(capsys, "--from-record", str(project)) == by_hand
    assert script(capsys, "-C", str(project), "--from-record") == by_hand


def test_a_record_that_names_neither_says_which_verb_to_run_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = write_record(tmp_path / "r.json")
    target = tmp_path / "job.sbatch"
    err = failure(capsys, "--from-record", str(record), "-o", str(target))
    assert err == (
        f"imagebuild: error: --from-record {record}: the record names no published image and no exported archive; "
        "run `imagebuild publish -t HOST[:PORT]/REPO` or `imagebuild export -o DIR` first (or give --image or --archive)\n"
    )
    assert not target.exists()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "no build record there; run `imagebuild build` first"),
        ("{not json", "not valid JSON"),
        ("[]", "not a build record (no image_id)"),
        (json.dumps({"image_id": IMAGE_ID, "published": "x"}), "published is not a list of strings"),
        (json.dumps({"image_id": IMAGE_ID, "published": ["kimi-k3:latest"]}), "is not a digest reference"),
        (json.dumps({"image_id": IMAGE_ID, "exported": ["/nowhere/x.json"]}), "is no longer usable (manifest"),
    ],
    ids=["missing", "not-json", "not-an-object", "not-a-list", "a-tag", "archive-gone"],
)
def test_a_bad_record_is_one_line(
    tmp_path: Path, content: str | None, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "r.json"
    if content is not None:
        record.write_text(content)
    assert expected in failure(capsys, "--from-record", str(record))


def test_the_recipe_comes_from_the_record_and_a_given_one_must_be_carried(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    carried = write_record(tmp_path / "a.json", published=[REFERENCE], recipes=["kimi-k3"])
    assert script(capsys, "--from-record", str(carried), "--json").count('"recipe": "kimi-k3"') == 1
    err = failure(capsys, "--from-record", str(carried), "--recipe", "kimi-k4")
    assert "--recipe 'kimi-k4': the image of" in err
    assert "carries no such recipe (it has kimi-k3)" in err
    several = write_record(tmp_path / "b.json", published=[REFERENCE], recipes=["glm-5", "qwen-4"])
    assert "carries recipes glm-5, qwen-4; choose one with --recipe" in failure(
        capsys, "--from-record", str(several)
    )
    older = tmp_path / "c.json"  # written before build recorded the recipes: the launcher's default
    older.write_text(json.dumps({"image_id": IMAGE_ID, "published": [REFERENCE]}))
    assert script(capsys, "--from-record", str(older)) == script(capsys, "--image", REFERENCE)


def test_build_records_the_recipes_the_context_carries() -> None:
    project = find_project(REPO)
    inputs = project.load("gfx942")
    context = build_context(render_inputs(inputs, RenderOptions(allow_unpinned=True)), inputs)
    assert context.recipes == ("kimi-k3",)
    assert "launcher/recipes/kimi-k3.toml" in {f.path for f in context.files}
