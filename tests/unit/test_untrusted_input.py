"""JSON files the user names (an export manifest, a build record, a DSSE envelope, a diff operand) are
anyone's: unreadable, not UTF-8, not JSON or nested past the parser's recursion, each is one line of bad
input (exit 2) naming the file, never a traceback and never exit 11 or 1."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from imagebuild.attest.keys import load_verification_key
from imagebuild.attest.verify import verify_attestation
from imagebuild.cli import main
from imagebuild.errors import ConfigError
from imagebuild.importer import cli as shipped_cli
from imagebuild.util.json_file import read_json_file

NESTED = "[" * 100_000 + "]" * 100_000  # deeper than json's C scanner recurses: RecursionError
SLURM = ["slurm", "--nodes", "2", "--variant", "pp2xtp8", "--model-path", "/models/kimi-k3"]
BAD_FILES = {
    "nested": NESTED.encode(),
    "nested-object": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "not-json": b"{not json",
    "not-utf8": b'{"archive": "\xff"}',
}


@pytest.fixture(autouse=True)
def no_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every refusal here comes before an engine is asked: asking this one would be exit 3."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/dead.sock")


@pytest.fixture
def public_key(tmp_path: Path) -> Path:
    path = tmp_path / "ed.pub"
    path.write_bytes(
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return path


def verbs(path: Path, key: Path, output: Path) -> dict[str, list[str]]:
    """Every verb that reads the JSON file ``path`` a user names; the slurm ones would write ``output``."""
    return {
        "import": ["import", str(path)],
        "import --json": ["import", str(path), "--json"],
        "slurm --archive": [*SLURM, "--archive", str(path), "-o", str(output)],
        "slurm --from-record": [*SLURM, "--from-record", str(path), "-o", str(output)],
        "attestations verify": ["attestations", "verify", str(path), "--key", str(key)],
        "diff": ["diff", str(path), str(path)],
    }


VERBS = ["import", "import --json", "slurm --archive", "slurm --from-record", "attestations verify", "diff"]


@pytest.mark.parametrize(
    ("verb", "content"),
    [
        pytest.param(verb, content, id=f"{verb}-{name}")
        for verb in VERBS
        for name, content in BAD_FILES.items()
        if not (verb == "diff" and name == "nested")  # not starting with '{': a tar to diff (its own tests)
    ],
)
def test_a_json_file_that_cannot_be_read_is_one_line_exit_2_naming_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    public_key: Path,
    verb: str,
    content: bytes,
) -> None:
    path = tmp_path / "given.json"
    path.write_bytes(content)
    output = tmp_path / "job.sbatch"
    args = verbs(path, public_key, output)[verb]
    assert main(args) == 2
    out, err = capsys.readouterr()
    (line,) = err.splitlines()
    assert line.startswith("imagebuild: error: ")
    assert str(path) in line
    assert "Traceback" not in err
    if content.startswith((b"[", b'{"a":')):
        assert "JSON nested too deeply to read" in line
    elif content.startswith(b"{not"):
        assert "not valid JSON" in line
    else:  # the manifest reader says what the decoder said; the others say it in words
        assert "not UTF-8" in line or "can't decode byte 0xff" in line
    if verb == "import --json":
        assert json.loads(out)["exit_code"] == 2
    else:
        assert out == ""
    assert not output.exists()


def test_the_shipped_importer_refuses_a_nested_manifest_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.json"
    path.write_text(NESTED)
    assert shipped_cli.main([str(path)]) == 2
    assert capsys.readouterr().err == (
        f"imagebuild-import: error: manifest {path}: JSON nested too deeply to read; export the image again\n"
    )


def test_an_envelope_that_is_not_json_is_bad_input_not_an_unverified_signature(
    tmp_path: Path, public_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.dsse.json"
    bad.write_text("{oops")
    with pytest.raises(ConfigError, match=r"bad\.dsse\.json': not valid JSON \(") as e:
        verify_attestation(bad, load_verification_key(public_key))
    assert e.value.exit_code == 2
    assert main(["attestations", "verify", str(bad), "--key", str(public_key)]) == 2
    assert capsys.readouterr().err == (
        f"imagebuild: error: '{bad}': not valid JSON (Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)); give the .dsse.json a signed build, export or publish wrote\n"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{", "not valid JSON (Expecting property name"),
        (b'{"archive": "a\xff"}', "not UTF-8 text (byte 14)"),
        (b"{\"image\": 1}", "JSON, but not an `imagebuild export` manifest (no 'archive' file name)"),
        (b'{"archive": 7}', "JSON, but not an `imagebuild export` manifest (no 'archive' file name)"),
    ],
    ids=["not-json", "not-utf8", "no-archive-key", "archive-not-a-name"],
)
def test_a_diff_operand_that_is_no_manifest_says_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    path = tmp_path / "m.json"
    path.write_bytes(content)
    assert main(["diff", str(path), "imagebuild/kimi-k3:gfx942"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"imagebuild: error: {path}: {message}")
    assert "docker save" in line


def test_an_unreadable_diff_operand_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """chmod 000 does not stop root, who runs these tests: the open is refused as the kernel would."""
    path = tmp_path / "m.json"
    path.write_text("{}")
    opened = Path.open

    def refusing(self: Path, *args: object, **kwargs: object) -> object:
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return opened(self, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(Path, "open", refusing)
    assert main(["diff", str(path), "imagebuild/kimi-k3:gfx942"]) == 2
    assert capsys.readouterr().err == (
        f"imagebuild: error: {path}: cannot read it (Permission denied); give a file you can read\n"
    )


def test_a_manifest_that_names_an_archive_with_a_control_character_is_shown_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"archive": "x\x1b[2J\n.tar"}))
    assert main(["diff", str(path), "imagebuild/kimi-k3:gfx942"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("names the archive x\\x1b[2J\\n.tar, which is not beside it; copy it there")


# The one reader ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, "F: no such file; H"),
        (lambda p: p.mkdir(), "F: not a regular file; H"),
        (os.mkfifo, "F: not a regular file; H"),  # a read would block for ever
        (lambda p: p.write_bytes(b"\xc3\x28"), "F: not UTF-8 text (byte 0); H"),
        (lambda p: p.write_text("[1,]"), "F: not valid JSON (Expecting value: line 1 column 4 (char 3)); H"),
        (lambda p: p.write_text(NESTED), "F: JSON nested too deeply to read; H"),
    ],
    ids=["missing", "directory", "fifo", "not-utf8", "not-json", "nested"],
)
def test_the_json_reader_turns_every_failure_into_one_line(tmp_path: Path, make: Callable[[Path], object], message: str) -> None:
    path = tmp_path / "f.json"
    make(path)
    with pytest.raises(ConfigError) as e:
        read_json_file(path, where="F", hint="H")
    assert str(e.value) == message


def test_the_json_reader_names_an_unreadable_path_and_reads_a_good_one(tmp_path: Path) -> None:
    too_long = tmp_path / ("b" * 300) / "f.json"  # ENAMETOOLONG: an OSError, not FileNotFoundError
    with pytest.raises(ConfigError, match=r"^F: cannot read it \(File name too long\); H$"):
        read_json_file(too_long, where="F", hint="H")
    with pytest.raises(ConfigError, match=r"^F: run build first$"):
        read_json_file(tmp_path / "none.json", where="F", hint="H", missing="run build first")
    (tmp_path / "ok.json").write_text('{"a": [1, "\\u00e9"]}')
    assert read_json_file(tmp_path / "ok.json", where="F", hint="H") == {"a": [1, "é"]}
