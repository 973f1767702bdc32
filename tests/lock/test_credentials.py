"""Registry credentials: read as docker reads them, sent only where docker would send them."""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
import requests

from imagebuild.engine.credentials import registry_credentials
from imagebuild.errors import ConfigError
from imagebuild.lock import lock
from imagebuild.lock.http import FetchError, Http
from imagebuild.lock.registry import RegistryClient, parse_image_name
from imagebuild.lock.registry_auth import may_send_credentials
from tests.lock.repositories import Registry
from tests.lock.servers import LocalServer, make_arch, options, send

REALM_HOST = "auth.example.test"  # not a loopback name: resolves to 127.0.0.1 only in these tests


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture
def docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    config = tmp_path / "docker-config"
    config.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    return config


def write_config(config: Path, data: dict[str, Any]) -> None:
    (config / "config.json").write_text(json.dumps(data), encoding="utf-8")


@pytest.fixture
def credential_helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A docker credential helper program (the real protocol: `get` reads the server on stdin)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    store = tmp_path / "store.json"
    helper = bin_dir / "docker-credential-imagebuildtest"
    helper.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        f"store = json.load(open({str(store)!r}))\n"
        "server = sys.stdin.read().strip()\n"
        "if sys.argv[1] != 'get' or server not in store:\n"
        "    print('credentials not found in native keychain'); sys.exit(1)\n"
        "user, secret = store[server]\n"
        "print(json.dumps({'ServerURL': server, 'Username': user, 'Secret': secret}))\n",
        encoding="utf-8",
    )
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    return store


# --- reading: docker-py's own auth module -------------------------------------------------


def test_no_docker_config_means_no_credentials(docker_config: Path) -> None:
    assert registry_credentials("ghcr.io") is None


def test_inline_auths_as_docker_keys_them(docker_config: Path) -> None:
    write_config(
        docker_config,
        {
            "auths": {
                "https://index.docker.io/v1/": {"auth": b64("hub:s3cret")},
                "127.0.0.1:5000": {"auth": b64("me:pw:with:colons")},
                "ghcr.io": {},
            }
        },
    )
    assert registry_credentials("docker.io") == ("hub", "s3cret")
    assert registry_credentials("127.0.0.1:5000") == ("me", "pw:with:colons")
    assert registry_credentials("ghcr.io") is None
    assert registry_credentials("quay.io") is None


def test_creds_store_and_cred_helpers(docker_config: Path, credential_helper: Path) -> None:
    credential_helper.write_text(
        json.dumps({"https://index.docker.io/v1/": ["hub", "from-store"], "ghcr.io": ["gh", "from-helper"]})
    )
    write_config(
        docker_config,
        {
            "auths": {"quay.io": {"auth": b64("quay:inline")}},
            "credsStore": "imagebuildtest",
            "credHelpers": {"ghcr.io": "imagebuildtest"},
        },
    )
    assert registry_credentials("docker.io") == ("hub", "from-store")
    assert registry_credentials("ghcr.io") == ("gh", "from-helper")
    assert registry_credentials("quay.io") == ("quay", "inline")  # not in the store: the auths entry


def test_an_identity_token_keeps_docker_marker(docker_config: Path) -> None:
    write_config(docker_config, {"auths": {"myregistry.azurecr.io": {"identitytoken": "refresh-me"}}})
    assert registry_credentials("myregistry.azurecr.io") == ("<token>", "refresh-me")


def test_a_missing_helper_is_bad_input_naming_the_config(docker_config: Path) -> None:
    write_config(docker_config, {"credsStore": "no-such-helper-anywhere"})
    with pytest.raises(ConfigError, match=r"config\.json: cannot read the credentials for ghcr\.io") as e:
        registry_credentials("ghcr.io")
    assert "docker-credential-no-such-helper-anywhere" in str(e.value)
    assert e.value.exit_code == 2


def test_a_malformed_auth_entry_is_bad_input(docker_config: Path) -> None:
    write_config(docker_config, {"auths": {"ghcr.io": {"auth": b64("no-colon-here")}}})
    with pytest.raises(ConfigError, match=r"credentials for ghcr\.io are malformed.*docker login ghcr\.io"):
        registry_credentials("ghcr.io")


# --- where they may go ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://auth.docker.io/token", True),
        ("https://registry.example.com:8443/v2/", True),
        ("http://127.0.0.1:5000/v2/", True),
        ("http://localhost/token", True),
        ("http://[::1]:5000/token", True),
        ("http://auth.example.com/token", False),
        ("http://10.0.0.7:5000/token", False),
        ("http://localhost.evil.example/token", False),
        ("ftp://127.0.0.1/token", False),
    ],
)
def test_credentials_travel_only_over_https_or_to_loopback(url: str, allowed: bool) -> None:
    assert may_send_credentials(url) is allowed


@dataclass
class AuthFront:
    """A registry front with a configurable challenge and a token endpoint that records what it got."""

    server: LocalServer
    scheme: str = "bearer"  # or "basic"
    realm_host: str = "127.0.0.1"
    required: str | None = None  # "user:password" the token endpoint (or basic) demands
    refresh_token: str | None = None  # accepted instead, by OAuth2 POST
    token_requests: list[dict[str, str]] = field(default_factory=list)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server.port}"


@pytest.fixture
def auth_front(registry: Registry) -> Iterator[AuthFront]:
    state: dict[str, AuthFront] = {}
    issued = "tok-1"

    def handle(h: BaseHTTPRequestHandler) -> None:
        front = state["front"]
        path = h.path.partition("?")[0]
        if path == "/token":
            length = int(h.headers.get("Content-Length") or 0)
            form = {k: v[0] for k, v in parse_qs(h.rfile.read(length).decode()).items()}
            given = h.headers.get("Authorization", "")
            front.token_requests.append({"method": h.command, "authorization": given, **form})
            basic_ok = front.required is None or given == "Basic " + b64(front.required)
            oauth_ok = front.refresh_token is not None and form.get("refresh_token") == front.refresh_token
            if not (basic_ok or oauth_ok):
                send(h, 401, b'{"errors":[{"code":"UNAUTHORIZED"}]}')
                return
            key = "access_token" if h.command == "POST" else "token"
            send(h, 200, json.dumps({key: issued}).encode(), {"Content-Type": "application/json"})
            return
        auth = h.headers.get("Authorization", "")
        expected = f"Bearer {issued}" if front.scheme == "bearer" else "Basic " + b64(front.required or "")
        if auth != expected:
            realm = f"http://{front.realm_host}:{front.server.port}/token"
            challenge = (
                f'Bearer realm="{realm}",service="front"' if front.scheme == "bearer" else 'Basic realm="x"'
            )
            send(h, 401, b"{}", {"WWW-Authenticate": challenge})
            return
        upstream = requests.get(
            registry.url + h.path, headers={"Accept": h.headers.get("Accept", "*/*")}, timeout=10
        )
        keep = ("Content-Type", "Docker-Content-Digest")
        send(
            h,
            upstream.status_code,
            upstream.content,
            {k: upstream.headers[k] for k in keep if k in upstream.headers},
        )

    server = LocalServer(handle)
    state["front"] = AuthFront(server=server)
    try:
        yield state["front"]
    finally:
        server.close()


@pytest.fixture
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """REALM_HOST resolves to 127.0.0.1, as a name on another machine would resolve to it."""
    guarded = socket.getaddrinfo

    def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        return guarded("127.0.0.1" if host == REALM_HOST else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)


def resolve(front: AuthFront, registry: Registry, repo: str, creds: tuple[str, str] | None) -> str:
    digest = registry.push_single(repo, "v1")
    name = parse_image_name(f"{front.host}/{repo}")
    with Http(timeout=5, backoff=0.01) as http:
        got = RegistryClient(http, {front.host: creds} if creds else {}).resolve(name, "v1", "linux/amd64")
    assert got.digest == digest
    return digest


def test_basic_auth_to_a_loopback_registry(auth_front: AuthFront, registry: Registry) -> None:
    auth_front.scheme, auth_front.required = "basic", "robot:pw"
    resolve(auth_front, registry, "basic/img", ("robot", "pw"))


def test_credentials_go_to_a_loopback_realm(auth_front: AuthFront, registry: Registry) -> None:
    auth_front.required = "robot:pw"
    resolve(auth_front, registry, "private/img", ("robot", "pw"))
    assert auth_front.token_requests[-1]["authorization"] == "Basic " + b64("robot:pw")


@pytest.mark.usefixtures("fake_dns")
def test_credentials_are_withheld_from_a_plain_http_realm_on_another_host(
    auth_front: AuthFront, registry: Registry
) -> None:
    auth_front.realm_host = REALM_HOST
    # Not even an anonymous token is fetched in the clear from another host (the lock's one rule).
    for repo, required in (("public/img", None), ("private/img", "robot:pw")):
        auth_front.required = required
        with pytest.raises(
            FetchError, match=rf"refused plain http to {REALM_HOST}, which is not a loopback"
        ) as e:
            resolve(auth_front, registry, repo, ("robot", "pw"))
        assert "Only https is trusted off this machine" in e.value.hint
    assert auth_front.token_requests == []  # never asked, so the credentials were never sent


def test_an_identity_token_is_traded_by_oauth(auth_front: AuthFront, registry: Registry) -> None:
    auth_front.required, auth_front.refresh_token = "nobody:never", "refresh-me"
    resolve(auth_front, registry, "azure/img", ("<token>", "refresh-me"))
    request = auth_front.token_requests[-1]
    assert (request["method"], request["grant_type"], request["authorization"]) == (
        "POST",
        "refresh_token",
        "",
    )


def test_lock_reads_credentials_from_the_docker_credential_helper(
    auth_front: AuthFront,
    registry: Registry,
    docker_config: Path,
    credential_helper: Path,
    tmp_path: Path,
) -> None:
    auth_front.required = "robot:from-helper"
    credential_helper.write_text(json.dumps({auth_front.host: ["robot", "from-helper"]}))
    write_config(docker_config, {"credsStore": "imagebuildtest"})
    digest = registry.push_single("helped/base", "ci")
    path = tmp_path / "pins.toml"
    path.write_text(
        f'[base]\nkind = "image"\nimage = "{auth_front.host}/helped/base"\ntag = "ci"\ndigest = ""\n'
        'platform_digest = ""\npython = "3.12"\nsite_packages = "/usr/lib/python3.12/site-packages"\n',
        encoding="utf-8",
    )
    lock(options(path, make_arch("linux/amd64")))
    assert f'digest = "{digest}"' in path.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("content", "why"),
    [(b'{"auths": {', "cannot be read as JSON"), (b"\xff\xfe", "cannot be read as JSON"), (b"[]", "is not a JSON object")],
    ids=["cut short", "not UTF-8", "a list"],
)
def test_a_broken_docker_config_is_bad_input_not_missing_credentials(
    docker_config: Path, content: bytes, why: str
) -> None:
    (docker_config / "config.json").write_bytes(content)
    with pytest.raises(ConfigError) as raised:
        registry_credentials("127.0.0.1:5000")
    (line,) = str(raised.value).splitlines()
    assert line.startswith(f"{docker_config / 'config.json'}: the docker config {why}")
    assert "run `docker login` again" in line
