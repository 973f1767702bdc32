"""Real local sources for the lock tests: git repositories behind a git daemon, and a docker-registry
pushed to over its HTTP API (no engine involved). The fixtures that start them are in conftest.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from tests.lock.servers import LocalServer, sha256_digest

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


@dataclass
class GitRepo:
    path: Path
    url: str

    def git(self, *args: str) -> str:
        env = {**os.environ, **GIT_ENV}
        out = subprocess.run(
            ["git", "-C", str(self.path), *args], check=True, capture_output=True, text=True, env=env
        )
        return out.stdout.strip()

    def commit(self, message: str) -> str:
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def tag(self, name: str, at: str = "HEAD", *, annotated: bool = False, force: bool = False) -> str:
        args = ["tag"] + (["-f"] if force else []) + (["-a", "-m", name] if annotated else [])
        self.git(*args, name, at)
        return self.git("rev-parse", f"{name}^{{commit}}")

    def branch(self, name: str, at: str = "HEAD") -> str:
        self.git("branch", "-f", name, at)
        return self.git("rev-parse", name)


@dataclass
class GitDaemon:
    base: Path
    port: int
    counter: list[int] = field(default_factory=lambda: [0])

    def repo(self, prefix: str = "repo") -> GitRepo:
        """A fresh repository served at git://127.0.0.1:PORT/NAME with one commit."""
        self.counter[0] += 1
        name = f"{prefix}{self.counter[0]}"
        path = self.base / name
        subprocess.run(
            ["git", "init", "-q", "-b", "main", str(path)], check=True, env={**os.environ, **GIT_ENV}
        )
        repo = GitRepo(path=path, url=f"git://127.0.0.1:{self.port}/{name}")
        repo.commit("initial")
        return repo


# --- registry ----------------------------------------------------------------


@dataclass
class Registry:
    """A docker-registry we push to over its HTTP API, no engine involved."""

    url: str  # http://127.0.0.1:PORT
    host: str  # 127.0.0.1:PORT

    def push_blob(self, repo: str, data: bytes) -> str:
        digest = sha256_digest(data)
        with requests.Session() as s:
            r = s.post(f"{self.url}/v2/{repo}/blobs/uploads/", timeout=10)
            assert r.status_code == 202, r.text
            location = r.headers["Location"]
            if location.startswith("/"):
                location = self.url + location
            sep = "&" if "?" in location else "?"
            r = s.put(
                f"{location}{sep}digest={digest}",
                data=data,
                headers={"Content-Type": "application/octet-stream"},
                timeout=10,
            )
            assert r.status_code == 201, r.text
        return digest

    def push_manifest(self, repo: str, ref: str, doc: dict[str, Any], media_type: str) -> str:
        body = json.dumps(doc, indent=2).encode()
        r = requests.put(
            f"{self.url}/v2/{repo}/manifests/{ref}",
            data=body,
            headers={"Content-Type": media_type},
            timeout=10,
        )
        assert r.status_code == 201, r.text
        return sha256_digest(body)

    def push_single(
        self,
        repo: str,
        tag: str,
        platform: str = "linux/amd64",
        *,
        media_type: str = DOCKER_MANIFEST,
        salt: str = "",
    ) -> str:
        """A one-platform image; returns its manifest digest."""
        os_name, arch = platform.split("/")[:2]
        config = json.dumps(
            {"architecture": arch, "os": os_name, "rootfs": {"type": "layers", "diff_ids": []}, "salt": salt}
        ).encode()
        layer = f"layer {repo} {platform} {salt}".encode()
        config_type = (
            "application/vnd.docker.container.image.v1+json"
            if media_type == DOCKER_MANIFEST
            else "application/vnd.oci.image.config.v1+json"
        )
        layer_type = (
            "application/vnd.docker.image.rootfs.diff.tar.gzip"
            if media_type == DOCKER_MANIFEST
            else "application/vnd.oci.image.layer.v1.tar+gzip"
        )
        doc = {
            "schemaVersion": 2,
            "mediaType": media_type,
            "config": {"mediaType": config_type, "size": len(config), "digest": self.push_blob(repo, config)},
            "layers": [{"mediaType": layer_type, "size": len(layer), "digest": self.push_blob(repo, layer)}],
        }
        return self.push_manifest(repo, tag, doc, media_type)

    def push_multi(
        self, repo: str, tag: str, platforms: tuple[str, ...], *, media_type: str = OCI_INDEX, salt: str = ""
    ) -> tuple[str, dict[str, str]]:
        """A multi-arch index; returns (index digest, {platform: manifest digest})."""
        child_type = OCI_MANIFEST if media_type == OCI_INDEX else DOCKER_MANIFEST
        children: dict[str, str] = {}
        entries = []
        for platform in platforms:
            digest = self.push_single(
                repo, f"tmp-{abs(hash((platform, salt)))}", platform, media_type=child_type, salt=salt
            )
            children[platform] = digest
            size = len(self._get_manifest(repo, digest))
            os_name, arch, *variant = platform.split("/")
            plat: dict[str, str] = {"os": os_name, "architecture": arch}
            if variant:
                plat["variant"] = variant[0]
            entries.append({"mediaType": child_type, "digest": digest, "size": size, "platform": plat})
        # a buildx-style attestation entry that must never be chosen
        entries.append(
            {
                "mediaType": child_type,
                "digest": children[platforms[0]],
                "size": len(self._get_manifest(repo, children[platforms[0]])),
                "platform": {"os": "unknown", "architecture": "unknown"},
            }
        )
        doc = {"schemaVersion": 2, "mediaType": media_type, "manifests": entries}
        return self.push_manifest(repo, tag, doc, media_type), children

    def _get_manifest(self, repo: str, digest: str) -> bytes:
        r = requests.get(
            f"{self.url}/v2/{repo}/manifests/{digest}",
            headers={"Accept": f"{OCI_MANIFEST}, {DOCKER_MANIFEST}"},
            timeout=10,
        )
        assert r.status_code == 200, r.text
        return r.content


@dataclass
class TokenProxy:
    """A registry front that demands bearer tokens, like Docker Hub does."""

    server: LocalServer
    host: str
    # repository prefix -> required "user:password" for its token
    private: dict[str, str] = field(default_factory=dict)
    tokens_issued: list[str] = field(default_factory=list)
