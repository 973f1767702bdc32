"""publish with docker's own credentials against a registry that demands them (htpasswd, like a real one).

The registry is Debian's docker-registry with `auth: htpasswd`, on this world's port base + 7; docker's
config is a temporary DOCKER_CONFIG, so the machine's ~/.docker is never read or changed.
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagebuild.cli import main
from sampleworld.layout import HOST, PORTS
from sampleworld.world import World

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("chdir_repo")]

USER, PASSWORD = "imagebuild-ci", "correct-horse"
PORT = PORTS.registry + 7


def _bcrypt(password: str) -> str:
    with warnings.catch_warnings():  # crypt is deprecated (3.13 drops it); glibc's bcrypt is what we need
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt

    return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))


@pytest.fixture(scope="module")
def locked_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("auth-registry")
    (root / "htpasswd").write_text(f"{USER}:{_bcrypt(PASSWORD)}\n")
    (root / "config.yml").write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
        f"http:\n  addr: {HOST}:{PORT}\n"
        f"auth:\n  htpasswd:\n    realm: imagebuild-test\n    path: {root / 'htpasswd'}\n"
    )
    log = (root / "registry.log").open("w")
    process = subprocess.Popen(["docker-registry", "serve", str(root / "config.yml")], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection((HOST, PORT), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail(f"the htpasswd registry did not start; see {root / 'registry.log'}")
                time.sleep(0.2)
        yield f"{HOST}:{PORT}"
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def _config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, auths: dict[str, object]) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({"auths": auths}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    return tmp_path / "config.json"


def _auth(user: str, password: str) -> dict[str, str]:
    return {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_refused_credentials_name_the_registry_and_docker_login(
    world: World,
    locked_registry: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = _config(tmp_path, monkeypatch, {locked_registry: _auth(USER, "wrong")})
    assert (
        main(
            [
                "publish",
                world.donor_image,
                "-t",
                f"{locked_registry}/imagebuild-test-distribute/donor",
            ]
        )
        == 8
    )
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"registry {locked_registry} refused the credentials from auths in {config}" in err
    assert err.endswith(f"run `docker login {locked_registry}`")


def test_missing_credentials_say_to_log_in(
    world: World,
    locked_registry: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _config(tmp_path, monkeypatch, {})
    assert (
        main(
            [
                "publish",
                world.donor_image,
                "-t",
                f"{locked_registry}/imagebuild-test-distribute/donor",
            ]
        )
        == 8
    )
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"registry {locked_registry} wants credentials and docker has none for it" in err


def test_docker_config_credentials_are_used(
    world: World,
    locked_registry: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _config(tmp_path, monkeypatch, {locked_registry: _auth(USER, PASSWORD)})
    repository = f"{locked_registry}/imagebuild-test-distribute/donor"
    assert main(["publish", world.donor_image, "-t", repository]) == 0
    assert capsys.readouterr().out.startswith(f"{repository}@sha256:")
