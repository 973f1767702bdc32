"""No hop of the lock goes over plain HTTP to a host that is not a loopback address: one rule, one message.

pins.toml itself may name ``http://`` only for loopback stand-ins (checked when it is read); these are
the hops a source chooses: a redirect, the file URL an index page lists, a registry's token realm.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from imagebuild.errors import LockError
from imagebuild.inputs.arch import ArchProfile
from imagebuild.inputs.references import parse_image_name
from imagebuild.lock import lock
from imagebuild.lock.http import Http, plain_http_problem
from imagebuild.lock.registry import RegistryClient
from imagebuild.lock.source_errors import FetchError
from tests.lock.repositories import Registry
from tests.lock.servers import FileServer, LocalServer, options, send, zip_bytes

WHEEL = zip_bytes(("pkg/__init__.py", b"x = 1\n"))
ELSEWHERE = "files.example.test"  # not loopback: never resolved, the lock refuses before connecting
RULE = f"plain http to {ELSEWHERE}, which is not a loopback address"
HINT = re.escape("Only https is trusted off this machine (plain http only to a loopback address)")


def locking_fails(tmp_path: Path, amd64: ArchProfile, text: str, pattern: str) -> LockError:
    path = tmp_path / "pins.toml"
    path.write_text(text, encoding="utf-8")
    before = path.read_bytes()
    with pytest.raises(LockError, match=pattern) as e:
        lock(options(path, amd64))
    assert (e.value.exit_code, "\n" in str(e.value)) == (5, False)
    assert path.read_bytes() == before
    return e.value


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://example.test/a.whl", None),
        ("http://127.0.0.1:8080/a.whl", None),
        ("http://localhost/a.whl", None),
        ("http://[::1]:5000/v2/", None),
        (f"http://{ELSEWHERE}/a.whl", RULE),
        ("http://10.0.0.7:5000/token", "plain http to 10.0.0.7, which is not a loopback address"),
        (
            "http://localhost.evil.example/a",
            "plain http to localhost.evil.example, which is not a loopback address",
        ),
        ("ftp://example.test/a.whl", "ftp scheme, not https"),
    ],
)
def test_the_rule(url: str, problem: str | None) -> None:
    assert plain_http_problem(url) == problem


def test_a_redirect_to_plain_http_elsewhere_is_refused(
    file_server: FileServer, tmp_path: Path, amd64: ArchProfile
) -> None:
    url = file_server.add("/a.whl", WHEEL)
    file_server.script["/a.whl"] = [(302, {"Location": f"http://{ELSEWHERE}/a.whl"})]
    locking_fails(
        tmp_path,
        amd64,
        f'[aiter]\nkind = "wheel"\nurl = "{url}"\nversion = "1.0"\nsha256 = ""\nsize = 0\n',
        rf"^\[aiter\] {url}: redirected to http://{ELSEWHERE}/a\.whl: {RULE}\. {HINT}",
    )
    assert file_server.hits["/a.whl"] == 1  # not retried


def test_a_redirect_on_loopback_is_followed(
    file_server: FileServer, tmp_path: Path, amd64: ArchProfile
) -> None:
    url = file_server.add("/a.whl", WHEEL)
    file_server.script["/a.whl"] = [(302, {"Location": f"{file_server.server.url}/a.whl"})]
    path = tmp_path / "pins.toml"
    path.write_text(f'[aiter]\nkind = "wheel"\nurl = "{url}"\nversion = "1.0"\nsha256 = ""\nsize = 0\n')
    assert lock(options(path, amd64)).change("aiter").status == "filled"


@pytest.mark.parametrize("hashed", [True, False])
def test_a_pypi_file_on_plain_http_elsewhere_is_refused(
    file_server: FileServer, registry: Registry, tmp_path: Path, amd64: ArchProfile, hashed: bool
) -> None:
    """pip would fetch it in the clear at build time, hash or not."""
    registry.push_single("plainhttp/base", "ci")
    name = "flydsl-0.2.4-py3-none-any.whl"
    entry: dict[str, object] = {"filename": name, "url": f"http://{ELSEWHERE}/{name}", "hashes": {}}
    if hashed:
        entry["hashes"] = {"sha256": "ab" * 32}
    doc = {"meta": {"api-version": "1.0"}, "name": "flydsl", "files": [entry]}
    file_server.add("/simple/flydsl/", json.dumps(doc).encode(), "application/vnd.pypi.simple.v1+json")
    locking_fails(
        tmp_path,
        amd64,
        f'[base]\nkind = "image"\nimage = "{registry.host}/plainhttp/base"\ntag = "ci"\ndigest = ""\n'
        'platform_digest = ""\npython = "3.12"\nsite_packages = "/usr/lib/python3.12/site-packages"\n\n'
        f'[flydsl]\nkind = "pypi"\nproject = "flydsl"\nversion = "0.2.4"\n'
        f'index = "{file_server.server.url}/simple/"\nfilename = ""\nsha256 = ""\n',
        rf"^\[flydsl\] http://{ELSEWHERE}/{name}: refused {RULE}\. {HINT}",
    )


def test_a_plain_http_token_realm_elsewhere_is_never_asked() -> None:
    realm = f"http://{ELSEWHERE}/token"

    def handle(h: object) -> None:
        send(h, 401, b"{}", {"WWW-Authenticate": f'Bearer realm="{realm}",service="x"'})  # type: ignore[arg-type]

    server = LocalServer(handle)
    try:
        name = parse_image_name(f"127.0.0.1:{server.port}/some/img")
        with Http(timeout=5, backoff=0.01) as http, pytest.raises(FetchError) as e:
            RegistryClient(http, {}).resolve(name, "v1", "linux/amd64")
    finally:
        server.close()
    assert e.value.url.startswith(realm + "?service=x&scope=")
    assert e.value.cause == f"refused {RULE}"
