"""A manifest is checked before anything is read or any engine asked: every malformed key is bad input
naming the key, in imagebuild's import and in the shipped importer alike, with imagebuild's exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagebuild import errors
from imagebuild.distribute.local_import import check_manifest
from imagebuild.errors import ConfigError
from imagebuild.importer import cli, failures
from imagebuild.importer.manifest import FORMAT, FORMAT_VERSION
from imagebuild.importer.socket_engine import SocketEngine

VALID = {
    "format": FORMAT,
    "format_version": FORMAT_VERSION,
    "archive": "kimi-k3-0123456789ab.tar.zst",
    "sha256": "0" * 64,
    "size": 10,
    "compression": "zstd",
    "image_id": "sha256:" + "1" * 64,
    "manifest_digest": "sha256:" + "2" * 64,
    "uncompressed_size": 20,
    "repo_tags": ["imagebuild/kimi-k3:gfx942"],
    "pins": {},
    "labels": {},
    "imagebuild_version": "0.1.0",
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sha256": None}, r"missing key 'sha256'"),
        ({"size": "10"}, r"'size' must be a int, not str"),
        ({"size": True}, r"'size' must be a int, not bool"),
        ({"repo_tags": "x:y"}, r"'repo_tags' must be a list"),
        ({"archive": "../../etc/passwd"}, r"'archive' must be a bare file name beside the manifest"),
        ({"archive": "/etc/passwd"}, r"'archive' must be a bare file name"),
        ({"archive": "sub/x.tar"}, r"'archive' must be a bare file name"),
        ({"archive": ".."}, r"'archive' must be a bare file name"),
        ({"archive": "x\n.tar"}, r"'archive' must be a bare file name"),
        ({"sha256": "xyz"}, r"'sha256' must be 64 lowercase hex digits"),
        ({"image_id": "06203f705c54"}, r"'image_id' must be sha256: and 64 hex digits"),
        ({"compression": "bzip2"}, r"'compression' must be zstd or gzip or none"),
        ({"repo_tags": ["UPPER/case:x"]}, r"repo tag 'UPPER/case:x' is not a repository:tag"),
        ({"repo_tags": ["no-tag"]}, r"repo tag 'no-tag' is not a repository:tag"),
        ({"pins": {"mori": 1}}, r"'pins' must map strings to strings"),
        ({"format_version": 4}, r"version 4 is not 'imagebuild-image-archive' version 3"),
        ({"manifest_digest": None}, r"'manifest_digest' must be sha256: and 64 hex digits, not None"),
        ({"manifest_digest": 7}, r"'manifest_digest' must be sha256: and 64 hex digits, not 7"),
        ({"uncompressed_size": None}, r"'uncompressed_size' must be the archive's byte count before compression"),
        ({"uncompressed_size": "9"}, r"'uncompressed_size' must be the archive's byte count"),
    ],
)
def test_a_malformed_manifest_is_bad_input_naming_the_key(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    data = {**VALID, **change}
    data = {k: v for k, v in data.items() if v is not None}
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=message) as e:
        check_manifest(path)
    assert str(e.value).startswith(f"manifest {path}: ")
    assert "\n" not in str(e.value).replace("x\n.tar", "")


@pytest.mark.parametrize(("text", "message"), [("{", "not valid JSON"), ("[]", "expected a JSON object")])
def test_a_manifest_that_is_not_an_object_is_bad_input(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        check_manifest(path)


def test_a_missing_manifest_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"manifest .*nope.json: not found"):
        check_manifest(tmp_path / "nope.json")


def test_the_importers_exit_codes_are_imagebuilds() -> None:
    assert failures.EXIT_BAD_INPUT == errors.ConfigError.exit_code == 2
    assert failures.EXIT_NO_ENGINE == errors.EngineError.exit_code == 3
    assert failures.EXIT_INTEGRITY == errors.IntegrityError.exit_code == 7


def test_the_shipped_importer_reports_bad_input_before_looking_for_an_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    path = tmp_path / "m.json"
    path.write_text(json.dumps({**VALID, "archive": "../x"}))
    assert cli.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"imagebuild-import: error: manifest {path}: 'archive' must be a bare file name")


def test_the_shipped_importer_refuses_an_ssh_docker_host(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(failures.EngineUnavailable, match="only unix:// and tcp:// engines"):
        SocketEngine("ssh://user@node")
