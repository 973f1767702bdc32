"""The grammar's particulars: publish -t as a full reference (and its deprecated old spelling),
-o meaning the same path on render, export and slurm, the JSON documents' shared key names,
the one JSON writer and the one engine context manager."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagebuild.build.core import BuildRecord
from imagebuild.cli import main
from imagebuild.cli.build import build_document
from imagebuild.cli.distribute import split_reference
from imagebuild.cli.image import verify_document
from imagebuild.cli.output import write_json
from imagebuild.engine.docker import DockerEngine
from imagebuild.engine.http_api import HttpEngine
from imagebuild.testing import FakeEngine
from imagebuild.verify import CheckResult, VerifyResult
from tests import REPO

TAG = "imagebuild/kimi-k3:gfx942"
REPOSITORY = "127.0.0.1:5000/ml/kimi-k3"
SLURM = ["slurm", "--nodes", "2", "--variant", "pp2xtp8", "--model-path", "/m"]
Replay = Callable[..., tuple[FakeEngine, BuildRecord]]  # the replay fixture (tests/unit/conftest.py)
DIGEST_REF = "127.0.0.1:5000/imagebuild/kimi-k3@sha256:" + "ab" * 32


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    """A fake engine holding TAG, which DockerEngine.opened gives every verb; cwd is an empty directory."""
    monkeypatch.chdir(tmp_path)
    fake = FakeEngine()
    fake.add_saved_image(TAG, size=1 << 12, labels={"io.imagebuild.arch": "gfx942"})
    monkeypatch.setattr(DockerEngine, "from_env", classmethod(lambda cls, timeout=600: fake))
    monkeypatch.setattr(HttpEngine, "from_env", classmethod(lambda cls, timeout=600: fake))  # build's
    return fake


def publish(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any] | None, str]:
    code = main(["publish", TAG, *argv, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("127.0.0.1:5000/kimi-k3", ("127.0.0.1:5000/kimi-k3", None)),
        ("127.0.0.1:5000/kimi-k3:v1", ("127.0.0.1:5000/kimi-k3", "v1")),
        ("registry.example.com/ml/kimi-k3:gfx942", ("registry.example.com/ml/kimi-k3", "gfx942")),
        ("kimi-k3", ("kimi-k3", None)),
    ],
)
def test_a_reference_splits_at_the_colon_after_the_last_slash(
    text: str, parts: tuple[str, str | None]
) -> None:
    assert split_reference(text) == parts


def test_publish_t_is_the_full_reference_pushed(
    engine: FakeEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document, err = publish(capsys, "-t", f"{REPOSITORY}:v1")
    assert code == 0, err
    assert document is not None
    assert (document["repository"], document["tag"]) == (REPOSITORY, "v1")
    assert document["reference"] == f"{REPOSITORY}@{engine.pushed[f'{REPOSITORY}:v1']}"
    assert "deprecated" not in err


def test_publish_t_without_a_tag_pushes_the_default_tag(
    engine: FakeEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document, err = publish(capsys, "--tag", REPOSITORY)
    assert code == 0, err
    assert document is not None
    image_id = engine.tags[TAG].removeprefix("sha256:")
    assert document["tag"] == f"gfx942-{image_id[:12]}"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (["--repository", REPOSITORY, "--tag", "v1"], f"use -t {REPOSITORY}:v1"),
        (["--repository", REPOSITORY], f"use -t {REPOSITORY}\n"),
    ],
)
def test_the_old_publish_spelling_works_with_one_deprecation_line(
    engine: FakeEngine, capsys: pytest.CaptureFixture[str], old: list[str], new: str
) -> None:
    code, document, err = publish(capsys, *old)
    assert code == 0, err
    assert document is not None
    assert document["repository"] == REPOSITORY
    (warning,) = [line for line in err.splitlines(keepends=True) if "deprecated" in line]
    assert warning.startswith("imagebuild: warning: publish --repository")
    assert new in warning + "\n"
    assert len(engine.pushed) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-t", "kimi-k3"], "-t/--tag 'kimi-k3': must start with the registry"),
        (["-t", f"{REPOSITORY}:-bad"], f"-t/--tag '{REPOSITORY}:-bad': a tag is 1-128"),
        (["-t", f"{REPOSITORY}@sha256:{'0' * 64}"], "without a digest; publish prints the digest it pushed"),
        (
            ["-t", REPOSITORY, "-t", f"{REPOSITORY}:v2"],
            "-t/--tag given 2 times: publish pushes one reference",
        ),
        ([], "publish needs -t HOST[:PORT]/REPO[:TAG]"),
        # The old spelling's values are checked as before, and a refused value prints no deprecation.
        (["--repository", REPOSITORY, "--tag", "a/b"], "--tag 'a/b': a tag is"),
    ],
)
def test_a_bad_publish_target_is_one_line_exit_2_before_the_engine(
    engine: FakeEngine, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["publish", TAG, *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("imagebuild: error: ")
    assert len(err.splitlines()) == 1
    assert message in err
    assert engine.pushed == {}


def test_render_o_dash_is_the_dockerfile_on_stdout_and_with_json_it_is_in_the_document(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["-C", str(REPO), "render", "--allow-unpinned", "-o", "-"]) == 0
    dockerfile = capsys.readouterr().out
    assert main(["-C", str(REPO), "render", "--allow-unpinned", "--output", "-", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["dockerfile"] == dockerfile
    assert (document["context"], document["check"], document["up_to_date"]) == (None, False, None)


def test_render_check_json_says_up_to_date(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-C", str(REPO), "render", "--check", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["context"], document["up_to_date"], document["problems"]) == ("docker/gfx942", True, [])
    assert "Dockerfile" in document["files"]


def test_render_check_json_of_a_stale_context_lists_the_problems_and_the_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "context"
    assert main(["-C", str(REPO), "render", "--allow-unpinned", "-o", str(target)]) == 0
    (target / "Dockerfile").write_text("FROM scratch\n")
    capsys.readouterr()
    assert main(["-C", str(REPO), "render", "--check", "-o", str(target), "--json"]) == 1
    document = json.loads(capsys.readouterr().out)  # the diff is in the document, not before it
    assert document["up_to_date"] is False
    assert document["problems"]
    assert document["diff"].startswith(f"--- {target}/Dockerfile\n+++ rendered\n")


def test_slurm_o_dash_is_stdout_as_no_o_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SLURM, "--image", DIGEST_REF]) == 0
    script = capsys.readouterr().out
    assert main([*SLURM, "--image", DIGEST_REF, "-o", "-"]) == 0
    assert capsys.readouterr().out == script
    assert not (tmp_path / "-").exists()
    assert main([*SLURM, "--image", DIGEST_REF, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["output"], document["script"]) == (None, script)
    target = tmp_path / "job.sbatch"
    assert main([*SLURM, "--image", DIGEST_REF, "--output", str(target), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["output"], document["script"]) == (str(target), None)
    assert target.read_text() == script
    assert (document["nodes"], document["image"], document["archive"]) == (2, DIGEST_REF, None)


def test_export_o_is_a_directory_and_refuses_stdout(
    engine: FakeEngine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", TAG, "-o", "-"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("imagebuild: error: argument -o/--output: '-': this verb writes several files")
    assert not Path("-").exists()
    assert main(["export", TAG, "-o", str(tmp_path / "out"), "--compress", "gzip"]) == 0
    manifest = Path(capsys.readouterr().out.strip())
    assert manifest.parent == tmp_path / "out"
    assert manifest.is_file()


def test_build_json_says_seconds_and_step_beside_the_old_keys(replay: Replay) -> None:
    _, record = replay("success")
    document = build_document(record)
    assert document["seconds"] == document["total_seconds"] == record.total_seconds
    steps = document["steps"]
    assert isinstance(steps, list)
    assert [s["step"] for s in steps] == [s["number"] for s in steps] == [t.number for t in record.steps]
    assert [s["seconds"] for s in steps] == [t.seconds for t in record.steps]
    assert set(document) - {"seconds"} == set(record.to_json())  # nothing else renamed or dropped


def test_verify_json_says_seconds_beside_duration_s() -> None:
    check = CheckResult(name="test_version", group="versions", outcome="passed", duration_s=0.25)
    result = VerifyResult(
        image=TAG, image_id="sha256:" + "0" * 64, arch="gfx942", checks=(check,), duration_s=3.5
    )
    document = verify_document(result)
    assert (document["seconds"], document["duration_s"]) == (3.5, 3.5)
    assert document["checks"] == [{**check.to_json(), "seconds": 0.25}]


def test_write_json_puts_the_schema_version_first(capsys: pytest.CaptureFixture[str]) -> None:
    write_json({"b": 1, "a": [2]})
    out = capsys.readouterr().out
    assert out == '{\n  "schema_version": 1,\n  "b": 1,\n  "a": [\n    2\n  ]\n}\n'
    with pytest.raises(AssertionError, match="write_json adds it"):
        write_json({"schema_version": 2})


def test_the_engine_a_verb_opens_is_closed_also_when_the_verb_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeEngine()
    monkeypatch.setattr(DockerEngine, "from_env", classmethod(lambda cls, timeout=600: fake))
    monkeypatch.setattr(HttpEngine, "from_env", classmethod(lambda cls, timeout=600: fake))  # build's
    seen: list[bool] = []

    def failing_verb() -> None:
        with DockerEngine.opened() as opened:
            seen.append(opened is fake and not fake.closed)
            msg = "the verb failed"
            raise RuntimeError(msg)

    with pytest.raises(RuntimeError, match="the verb failed"):
        failing_verb()
    assert seen == [True]  # open inside the block
    assert fake.closed
