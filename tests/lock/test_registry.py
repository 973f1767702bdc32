"""Image digests from a real docker-registry (pushed to over its HTTP API)."""

from __future__ import annotations

import hashlib
from http.server import BaseHTTPRequestHandler

import pytest
import requests

from imagebuild.errors import ConfigError
from imagebuild.lock.http import FetchError, Http
from imagebuild.lock.registry import (
    ImageDigests,
    ImageName,
    RegistryClient,
    is_loopback,
    parse_image_name,
)
from tests.lock.repositories import DOCKER_LIST, OCI_MANIFEST, Registry, TokenProxy
from tests.lock.servers import LocalServer, send


def resolve(
    image: str, tag: str, platform: str = "linux/amd64", creds: dict[str, tuple[str, str]] | None = None
) -> ImageDigests:
    with Http(timeout=5, backoff=0.01) as http:
        return RegistryClient(http, creds or {}).resolve(parse_image_name(image), tag, platform)


@pytest.mark.parametrize(
    ("image", "registry", "repository"),
    [
        ("rocm/vllm-dev", "docker.io", "rocm/vllm-dev"),
        ("ubuntu", "docker.io", "library/ubuntu"),
        ("docker.io/ubuntu", "docker.io", "library/ubuntu"),
        ("index.docker.io/amdsiloai/vllm", "docker.io", "amdsiloai/vllm"),
        ("ghcr.io/rocm/x/y", "ghcr.io", "rocm/x/y"),
        ("localhost/a", "localhost", "a"),
        ("127.0.0.1:5000/a/b", "127.0.0.1:5000", "a/b"),
    ],
)
def test_image_names_normalise_like_docker(image: str, registry: str, repository: str) -> None:
    assert parse_image_name(image) == ImageName(registry=registry, repository=repository)


def test_docker_hub_api_host_and_schemes() -> None:
    assert parse_image_name("rocm/vllm-dev").base_url == "https://registry-1.docker.io/v2/rocm/vllm-dev"
    assert parse_image_name("localhost:5000/a").base_url == "http://localhost:5000/v2/a"
    assert parse_image_name("registry.example.com/a").base_url.startswith("https://")


@pytest.mark.parametrize("bad", ["rocm/vllm-dev:tag", "Rocm/vllm", "a//b"])
def test_bad_image_names_are_config_errors(bad: str) -> None:
    with pytest.raises(ConfigError, match="not a valid repository name"):
        parse_image_name(bad)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1:5000", True),
        ("127.8.9.1", True),
        ("localhost:1", True),
        ("[::1]:5000", True),
        ("ghcr.io", False),
        ("10.0.0.1:5000", False),
    ],
)
def test_loopback_detection(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_single_manifest_digest_is_its_own_platform_digest(registry: Registry) -> None:
    digest = registry.push_single("single/docker", "v1")
    got = resolve(f"{registry.host}/single/docker", "v1")
    assert (got.digest, got.platform_digest) == (digest, digest)
    oci = registry.push_single("single/oci", "v1", media_type=OCI_MANIFEST)
    assert resolve(f"{registry.host}/single/oci", "v1").digest == oci


def test_oci_index_records_index_and_platform_digest(registry: Registry) -> None:
    index, children = registry.push_multi("multi/oci", "v1", ("linux/amd64", "linux/arm64/v8"))
    amd = resolve(f"{registry.host}/multi/oci", "v1")
    assert (amd.digest, amd.platform_digest) == (index, children["linux/amd64"])
    arm = resolve(f"{registry.host}/multi/oci", "v1", "linux/arm64")
    assert (arm.digest, arm.platform_digest) == (index, children["linux/arm64/v8"])


def test_docker_manifest_list(registry: Registry) -> None:
    index, children = registry.push_multi(
        "multi/docker", "v1", ("linux/arm64", "linux/amd64"), media_type=DOCKER_LIST
    )
    got = resolve(f"{registry.host}/multi/docker", "v1")
    assert (got.digest, got.platform_digest) == (index, children["linux/amd64"])


def test_index_without_our_platform_lists_what_it_has(registry: Registry) -> None:
    registry.push_multi("multi/armonly", "v1", ("linux/arm64/v8",))
    with pytest.raises(FetchError, match=r"no manifest for linux/amd64 \(it has: linux/arm64/v8\)"):
        resolve(f"{registry.host}/multi/armonly", "v1")


def test_single_manifest_of_another_arch_is_refused(registry: Registry) -> None:
    registry.push_single("single/arm", "v1", "linux/arm64")
    with pytest.raises(FetchError, match="single-platform image for linux/arm64, not linux/amd64"):
        resolve(f"{registry.host}/single/arm", "v1")


def test_missing_tag_is_404(registry: Registry) -> None:
    registry.push_single("single/notag", "v1")
    with pytest.raises(FetchError, match="HTTP 404") as e:
        resolve(f"{registry.host}/single/notag", "nope")
    assert e.value.url.endswith("/single/notag/manifests/nope")
    assert "check the name, tag" in e.value.hint


def test_anonymous_bearer_token(registry: Registry, token_registry: TokenProxy) -> None:
    index, children = registry.push_multi("public/img", "v1", ("linux/amd64",))
    got = resolve(f"{token_registry.host}/public/img", "v1")
    assert (got.digest, got.platform_digest) == (index, children["linux/amd64"])
    assert any(t.endswith("public/img") for t in token_registry.tokens_issued)


def test_private_repository_needs_credentials(registry: Registry, token_registry: TokenProxy) -> None:
    digest = registry.push_single("private/img", "v1")
    token_registry.private["private/"] = "me:s3cret"
    with pytest.raises(FetchError, match="token endpoint refused anonymous access") as e:
        resolve(f"{token_registry.host}/private/img", "v1")
    assert e.value.status == 401
    assert "docker login" in e.value.hint
    with pytest.raises(FetchError, match="refused the credentials"):
        resolve(f"{token_registry.host}/private/img", "v1", creds={token_registry.host: ("me", "wrong")})
    got = resolve(f"{token_registry.host}/private/img", "v1", creds={token_registry.host: ("me", "s3cret")})
    assert got.digest == digest


@pytest.mark.parametrize(
    ("served", "error"),
    [
        ("right-sha512", None),
        ("wrong-sha512", r"the registry says the manifest is sha512:0{128} but its bytes hash to sha512:"),
        ("sha384:" + "0" * 96, r"Docker-Content-Digest 'sha384:0+', which is not a sha256 or sha512 digest"),
    ],
)
def test_a_sha512_digest_header_is_checked_too(registry: Registry, served: str, error: str | None) -> None:
    """A registry may name a manifest by sha512: that is checked as a sha256 would be."""
    digest = registry.push_single("digest512/img", "v1")

    def handle(h: BaseHTTPRequestHandler) -> None:
        upstream = requests.get(
            registry.url + h.path, headers={"Accept": h.headers.get("Accept", "*/*")}, timeout=10
        )
        headers = {"Content-Type": upstream.headers.get("Content-Type", "")}
        if "/manifests/" in h.path:
            value = {
                "right-sha512": "sha512:" + hashlib.sha512(upstream.content).hexdigest(),
                "wrong-sha512": "sha512:" + "0" * 128,
            }.get(served, served)
            headers["Docker-Content-Digest"] = value
        send(h, upstream.status_code, upstream.content, headers)

    front = LocalServer(handle)
    try:
        if error is None:
            assert resolve(f"127.0.0.1:{front.port}/digest512/img", "v1").digest == digest  # sha256 recorded
        else:
            with pytest.raises(FetchError, match=error):
                resolve(f"127.0.0.1:{front.port}/digest512/img", "v1")
    finally:
        front.close()
