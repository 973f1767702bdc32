"""`imagebuild init` and what makes a project: a team's own image repository, outside this checkout.

The project init writes renders the very context this repository commits (docker/gfx942/, byte for
byte and mode for mode), from -C and from any directory inside it; a refusal writes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.project import PROJECT_FILES, find_project
from imagebuild.render.context import read_context_dir
from imagebuild.scaffold.new_project import DEFAULT_DEFINITION, definition_files, shipped_definitions
from tests import REPO
from tests.unit.cli_support import disk_full_after


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` and its bytes: what a refusal must leave exactly as it was."""
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


def context_of(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {f.path: (f.data, f.mode) for f in read_context_dir(directory)}


def test_the_shipped_definition_is_this_checkouts_own_files() -> None:
    assert shipped_definitions() == (DEFAULT_DEFINITION,)
    files = definition_files(DEFAULT_DEFINITION)
    assert [f.path for f in files] == sorted(f.path for f in files)
    for f in files:
        assert f.data == (REPO / f.path).read_bytes(), f.path
    on_disk = {p.relative_to(REPO).as_posix() for p in (REPO / "stages").rglob("*.toml")}
    assert on_disk <= {f.path for f in files}
    assert {"pins.toml", "pylock.toml", "stages/image.toml", "stages/arch/gfx942.toml"} <= {
        f.path for f in files
    }
    assert any(f.path.startswith("constraints/") and f.path.endswith(".txt") for f in files)


def test_init_writes_a_project_that_renders_the_committed_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    project = tmp_path / "team-image"
    assert main(["init", str(project)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{project}\n"
    assert f"next: `imagebuild -C {project} lock`" in err
    assert find_project(project, search_parents=False).root == project
    # -C from elsewhere: the committed context, byte for byte and mode for mode.
    assert main(["-C", str(project), "render", "--allow-unpinned"]) == 0
    assert context_of(project / "docker" / "gfx942") == context_of(REPO / "docker" / "gfx942")
    # From a subdirectory: the project above is found, and its context is up to date.
    sub = project / "stages" / "arch"
    monkeypatch.chdir(sub)
    assert main(["render", "--check"]) == 0
    assert main(["plan"]) == 0
    assert capsys.readouterr().out.splitlines()[0].split() == ["step", "instruction", "title", "pins"]


def test_init_into_the_working_directory_with_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".git").mkdir()  # a fresh clone of the team's repository is empty for init
    monkeypatch.chdir(tmp_path)
    assert main(["init", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["directory"] == "."
    assert document["definition"] == DEFAULT_DEFINITION
    assert document["files"] == [f.path for f in definition_files(DEFAULT_DEFINITION)]
    assert document["overwritten"] == []
    assert all((tmp_path / path).stat().st_mode & 0o777 == 0o644 for path in document["files"])


def test_a_non_empty_directory_is_refused_with_the_files_listed_and_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "p"
    (project / "stages").mkdir(parents=True)
    (project / "stages" / "04-mori.toml").write_text("mine\n")
    (project / "pins.toml").write_text("mine\n")
    (project / "notes.txt").write_text("kept\n")
    before = snapshot(project)
    assert main(["init", str(project)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    *listed, last = err.splitlines()
    assert listed == [
        f"  would overwrite {project}/pins.toml",
        f"  would overwrite {project}/stages/04-mori.toml",
    ]
    assert last == (
        f"imagebuild: error: {project}: not empty (3 entries); init would overwrite the 2 files listed above; "
        "pass --force to write the project there anyway, or name an empty directory"
    )
    assert snapshot(project) == before


def test_force_overwrites_the_definitions_files_and_keeps_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "pins.toml").write_text("mine\n")
    (project / "notes.txt").write_text("kept\n")
    assert main(["init", str(project), "--force", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["overwritten"] == ["pins.toml"]
    assert (project / "pins.toml").read_bytes() == (REPO / "pins.toml").read_bytes()
    assert (project / "notes.txt").read_text() == "kept\n"


def test_a_non_empty_directory_whose_files_init_does_not_have_is_refused_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "README.md").write_text("ours\n")
    assert main(["init", str(tmp_path)]) == 2
    assert "none of its files would be overwritten; pass --force" in capsys.readouterr().err
    assert snapshot(tmp_path) == {"README.md": b"ours\n"}


@pytest.mark.parametrize(
    ("blocker", "expected"),
    [
        ("stages", "a file where init writes the directory stages/"),
        ("pins.toml/", "a directory where init writes the file pins.toml"),
    ],
)
def test_a_file_where_a_directory_goes_is_refused_before_anything_is_written(
    tmp_path: Path, blocker: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if blocker.endswith("/"):
        (tmp_path / blocker).mkdir()
    else:
        (tmp_path / blocker).write_text("x\n")
    before = snapshot(tmp_path)
    assert main(["init", str(tmp_path), "--force"]) == 2
    err = capsys.readouterr().err
    assert expected in err
    assert len(err.splitlines()) == 1
    assert snapshot(tmp_path) == before


def test_an_unknown_definition_lists_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", str(tmp_path / "p"), "--from", "kimi-k4"]) == 2
    assert capsys.readouterr().err == (
        "imagebuild: error: argument --from: invalid choice: 'kimi-k4' (choose from 'kimi-k3-gfx942'); "
        "see `imagebuild init --help`\n"
    )
    assert not (tmp_path / "p").exists()


def test_dir_that_is_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_text("x\n")
    assert main(["init", str(tmp_path / "f")]) == 2
    assert "is not a directory; name a new or empty directory for the project" in capsys.readouterr().err


def test_outside_a_project_the_error_says_what_makes_one_and_how_to_make_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    for argv in (["render"], ["-C", str(tmp_path), "render"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1
        assert all(name in err for name in PROJECT_FILES)
        assert "`imagebuild init DIR` writes one" in err


def test_a_directory_init_cannot_write_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    # /proc refuses a new directory even to root: the write fails after the plan passed.
    assert main(["init", "/proc/imagebuild-init-test"]) == 2
    assert capsys.readouterr().err == (
        "imagebuild: error: /proc/imagebuild-init-test: cannot write the project (No such file or directory); "
        "nothing was written, choose a directory you can write\n"
    )


def test_a_disk_that_fills_half_way_leaves_the_directory_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "pins.toml").write_text("mine\n")  # overwritten by --force, were the write to succeed
    before = snapshot(project)
    disk_full_after(monkeypatch, files=len(definition_files(DEFAULT_DEFINITION)) - 1)
    assert main(["init", str(project), "--force"]) == 2
    assert capsys.readouterr().err == (
        f"imagebuild: error: {project}: cannot write the project (No space left on device); "
        "nothing was written, choose a directory you can write\n"
    )
    assert snapshot(project) == before
    assert sorted(p.name for p in project.iterdir()) == ["pins.toml"]  # no staged file, no directory made


def test_a_new_directory_that_could_not_be_filled_is_not_left_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    disk_full_after(monkeypatch, files=3)
    assert main(["init", str(tmp_path / "new" / "project")]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
