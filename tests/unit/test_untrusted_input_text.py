"""Text from an export manifest or an image archive is anyone's: a control character in a manifest is bad
input naming the key (it would reach the sbatch script, a log or a terminal), and diff's report shows
the names and values of an archive escaped, one line each."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.distribute.local_import import check_manifest
from imagebuild.distribute.shipped_importer import IMPORTER_NAME, importer_zipapp
from imagebuild.errors import ConfigError
from imagebuild.importer import cli as shipped_cli
from imagebuild.importer import manifest as manifest_module
from imagebuild.importer.manifest import Manifest
from imagebuild.launcher import text as launcher_text
from tests.prerequisites import PYTHON38
from tests.unit.imagetars import Item, config, layer, saved

HEX = "cd" * 32
SLURM = ["slurm", "--nodes", "2", "--variant", "pp2xtp8", "--model-path", "/models/kimi-k3"]
GOOD = Manifest(
    archive="kimi-k3-cdcdcdcdcdcd.tar.zst", sha256="ef" * 32, size=1, compression="zstd",
    image_id=f"sha256:{HEX}", manifest_digest="sha256:" + "ab" * 32, uncompressed_size=2,
    repo_tags=("imagebuild/kimi-k3:gfx942",), pins={"vllm": "0" * 40}, labels={"org.example.title": "Kimi ü ✓"},
    imagebuild_version="0.1.0", origin="node1:/shared/images",
)  # fmt: skip


def export_dir(tmp_path: Path, **changes: object) -> Path:
    """A manifest as export writes it, with ``changes`` made to its JSON, and the files beside it."""
    path = tmp_path / f"{GOOD.archive}.json"
    path.write_text(json.dumps({**GOOD.to_json(), **changes}))
    (tmp_path / GOOD.archive).write_bytes(b"x")
    (tmp_path / IMPORTER_NAME).write_text("# the shipped importer\n")
    return path


# Where a key has a kind (a digest, a tag, a layer's path), its check names what it must be; the free
# text (origin, labels, pins, the version) is refused for the control character itself.
CONTROLLED = {
    "image_id": ({"image_id": f"sha256:{HEX}\n"}, f"'image_id' must be sha256: and 64 hex digits, not 'sha256:{HEX}\\n'"),
    "sha256": ({"sha256": "ef" * 32 + "\n"}, "'sha256' must be 64 lowercase hex digits, not '" + "ef" * 32 + "\\n'"),
    "manifest_digest": ({"manifest_digest": f"sha256:{HEX}\r"}, "'manifest_digest' must be sha256: and 64 hex digits"),
    "repo_tag": ({"repo_tags": ["imagebuild/kimi-k3:gfx942\n"]}, "repo tag 'imagebuild/kimi-k3:gfx942\\n' is not a repository:tag"),
    "layer file": ({"layers": [{"diff_id": f"sha256:{HEX}", "file": "a\tb/layer.tar"}]}, "'layers' must list a docker archive's layers"),
    "origin": ({"origin": "node1:/x\x1b[2J"}, "'origin' contains a control character, U+001B; export the image again"),
    "label value": ({"labels": {"title": "a\u202eb"}}, "'labels'['title'] contains a control character, U+202E"),
    "label key": ({"labels": {"ti\ntle": "x"}}, "'labels' key 'ti\\ntle' contains a control character, U+000A"),
    "pin": ({"pins": {"vllm": "0\u2028"}}, "'pins'['vllm'] contains a control character, U+2028"),
    "version": ({"imagebuild_version": "0.1\x85"}, "'imagebuild_version' contains a control character, U+0085"),
    "del": ({"imagebuild_version": "0.1\x7f"}, "'imagebuild_version' contains a control character, U+007F"),
    "attestation": ({"attestations": {"a.dsse.json": "ef" * 32 + "\n"}}, "'attestations' must map bare file names"),
}  # fmt: skip


@pytest.mark.parametrize(("change", "message"), CONTROLLED.values(), ids=CONTROLLED.keys())
def test_a_control_character_anywhere_in_a_manifest_is_bad_input_naming_the_key(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    path = export_dir(tmp_path, **change)
    with pytest.raises(ConfigError) as e:
        check_manifest(path)
    assert e.value.exit_code == 2
    assert str(e.value).startswith(f"manifest {path}: {message}")
    assert str(e.value).isprintable()


def test_a_trailing_newline_is_refused_by_the_patterns_themselves() -> None:
    """fullmatch: `$` would match before the newline."""
    assert not manifest_module.IMAGE_ID_RE.fullmatch(f"sha256:{HEX}\n")
    assert not manifest_module.SHA256_RE.fullmatch(HEX + "\n")
    assert not manifest_module.REPO_TAG_RE.fullmatch("imagebuild/kimi-k3:gfx942\n")
    assert manifest_module.REPO_TAG_RE.fullmatch("imagebuild/kimi-k3:gfx942")


def test_the_manifest_refuses_exactly_the_characters_the_launcher_and_the_script_refuse() -> None:
    """The importer cannot import the launcher (the zipapp carries the importer alone): a copy, kept equal."""
    assert manifest_module.CONTROL_RE.pattern == launcher_text.CONTROL_RE.pattern


def test_a_manifest_of_printable_text_is_still_read(tmp_path: Path) -> None:
    assert check_manifest(export_dir(tmp_path)) == GOOD


def test_slurm_writes_no_script_for_an_image_id_with_a_newline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = export_dir(tmp_path, image_id=f"sha256:{HEX}\n")
    target = tmp_path / "job.sbatch"
    assert main([*SLURM, "--archive", str(path), "-o", str(target)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"imagebuild: error: manifest {path}: 'image_id' must be sha256: and 64 hex digits, not 'sha256:{HEX}\\n'\n"
    assert not target.exists()


def test_import_refuses_a_repo_tag_with_a_newline_before_the_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/dead.sock")  # reaching it would be exit 3
    path = export_dir(tmp_path, repo_tags=["imagebuild/kimi-k3:gfx942\n"])
    assert main(["import", str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("repo tag 'imagebuild/kimi-k3:gfx942\\n' is not a repository:tag reference")
    assert shipped_cli.main([str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"imagebuild-import: error: manifest {path}: repo tag 'imagebuild/kimi-k3:gfx942\\n' is not a repository:tag reference"


@pytest.mark.skipif(not PYTHON38.exists(), reason=f"no Python 3.8 at {PYTHON38} (pyenv)")
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"origin": "x\x1b]0;pwned\x07"}, "'origin' contains a control character, U+001B"),
        ({"labels": {"title": "\u202egnp.exe"}}, "'labels'['title'] contains a control character, U+202E"),
    ],
    ids=["origin", "label"],
)
def test_the_zipapp_refuses_them_on_python_3_8(tmp_path: Path, change: dict[str, object], message: str) -> None:
    zipapp = tmp_path / IMPORTER_NAME
    path = export_dir(tmp_path, **change)
    zipapp.write_bytes(importer_zipapp())
    done = subprocess.run(
        [str(PYTHON38), "-I", "-S", str(zipapp), str(path)],
        env={"PATH": "/usr/bin:/bin", "DOCKER_HOST": f"unix://{tmp_path}/docker.sock"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == f"imagebuild-import: error: manifest {path}: {message}; export the image again\n"


# diff's report -------------------------------------------------------------------------------------


def archive(path: Path, names: list[str], env: str) -> Path:
    data = layer([Item(name, data=b"same") for name in names])
    cfg = config([data])
    cfg["config"]["Env"] = ["PATH=/usr/bin", env]
    path.write_bytes(saved([data], cfg))
    return path


def test_diff_shows_names_and_values_from_an_archive_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = archive(tmp_path / "a.tar", ["ok"], "A=1")
    b = archive(tmp_path / "b.tar", ["ok", "evil\x1b[2Jname", "new\nline", "rtl\u202etxt.sh"], "A=2\x1b[31m")
    assert main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert all(line.isprintable() for line in out.splitlines())
    assert "  env A: 1 -> 2\\x1b[31m\n" in out
    assert "evil\\x1b[2Jname (file)" in out
    assert "new\\nline (file)" in out
    assert "rtl\\u202etxt.sh (file)" in out
    assert main(["diff", str(a), str(b), "--json"]) == 1  # JSON escapes by itself, and keeps the values
    text = capsys.readouterr().out
    assert "\x1b" not in text
    assert "evil\x1b[2Jname" in {change["path"] for change in json.loads(text)["files"]}


def test_diff_escapes_a_name_that_is_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = archive(tmp_path / "a.tar", ["ok"], "A=1")
    b = archive(tmp_path / "b.tar", ["ok", "caf\udce9"], "A=1")  # the byte 0xe9 alone, surrogate-escaped
    assert main(["diff", str(a), str(b)]) == 1
    assert "caf\\udce9 (file)" in capsys.readouterr().out
