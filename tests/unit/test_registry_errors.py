"""Registry failures in plain words: which registry, where docker's credentials came from, what to do."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from imagebuild.engine.credentials import credentials_for, registry_failure
from imagebuild.errors import RegistryError

REGISTRY = "127.0.0.1:5000"


@pytest.fixture
def docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    return tmp_path / "config.json"


def _write(path: Path, data: dict[str, object]) -> None:
    path.write_text(json.dumps(data))


def test_refused_credentials_say_where_they_came_from_and_to_log_in(docker_config: Path) -> None:
    auth = base64.b64encode(b"bot:wrong").decode()
    _write(docker_config, {"auths": {REGISTRY: {"auth": auth}}})
    credentials = credentials_for(REGISTRY)
    assert credentials.config is not None
    error = registry_failure("push of x", REGISTRY, "unauthorized: authentication required", credentials)
    assert isinstance(error, RegistryError)
    assert str(error) == (
        f"push of x: registry {REGISTRY} refused the credentials from auths in {docker_config} "
        f"(unauthorized: authentication required); run `docker login {REGISTRY}`"
    )


def test_missing_credentials_say_to_log_in(docker_config: Path) -> None:
    _write(docker_config, {"auths": {"other.example.com": {"auth": "eDp5"}}})
    error = registry_failure("push of x", REGISTRY, "no basic auth credentials", credentials_for(REGISTRY))
    assert f"registry {REGISTRY} wants credentials and docker has none for it ({docker_config})" in str(error)
    assert str(error).endswith(f"run `docker login {REGISTRY}`")


def test_a_credential_helper_that_fails_is_named(docker_config: Path) -> None:
    _write(docker_config, {"credHelpers": {REGISTRY: "imagebuild-test-absent"}})
    with pytest.raises(
        RegistryError, match=rf"docker's credentials for {REGISTRY} could not be read: .*docker login"
    ):
        credentials_for(REGISTRY)


@pytest.mark.parametrize(
    ("detail", "expected"),
    [
        (
            'Get "http://127.0.0.1:9/v2/": dial tcp 127.0.0.1:9: connect: connection refused',
            "is unreachable from the Docker engine",
        ),
        ("http: server gave HTTP response to HTTPS client", "insecure-registries"),
        ("manifest unknown: manifest unknown", "has no such image"),
    ],
)
def test_other_registry_failures(docker_config: Path, detail: str, expected: str) -> None:
    error = registry_failure("pull of x", REGISTRY, detail, credentials_for(REGISTRY))
    assert expected in str(error)
    assert str(error).startswith(f"pull of x: registry {REGISTRY} ")
