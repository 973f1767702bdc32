"""Helpers for verify's tests: a pins file for tmp, and images built for the checks (plain functions)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.image_files.imagebuild_check import GUARD_KEY
from imagebuild.inputs.layout import (
    APT_PACKAGES_FILE,
    BUILD_CONSTRAINT_FILE,
    CHECK_TOOL,
    CONSTRAINT_FILE,
    LAUNCHER,
    PYTHON_PACKAGES_FILE,
    ROUTER,
    VERSIONS_FILE,
)
from imagebuild.launcher import serve
from imagebuild.verify.expectations import Expectations
from imagebuild.verify.image_facts import (
    NONEMPTY_LABELS,
    REPINNED_PIN,
    ROUTER_HELP_WORD,
    TUNED_CONFIG_ROOTS,
    TUNED_CONFIGS,
)

REPO = Path(__file__).resolve().parents[2]
LAUNCHER_DIR = Path(serve.__file__).resolve().parent
CHECK_TOOL_SOURCE = REPO / "imagebuild" / "image_files" / "imagebuild_check.py"


def write_pins(
    path: Path, *, python: str = "3.12", site_packages: str = "/usr/local/lib/python3.12/dist-packages"
) -> Path:
    """A fully locked pins file (fake but well-formed identities); the tests take values from it."""
    h = hashlib.sha256
    path.write_text(
        f"""
[base]
kind = "image"
image = "example.test/rocm/vllm-dev"
tag = "ci_base-test"
digest = "sha256:{h(b"base").hexdigest()}"
platform_digest = "sha256:{h(b"base-amd64").hexdigest()}"
python = "{python}"
site_packages = "{site_packages}"

[donor]
kind = "image"
image = "example.test/amdsiloai/vllm"
tag = "kimi-k3-test"
digest = "sha256:{h(b"donor").hexdigest()}"
platform_digest = "sha256:{h(b"donor-amd64").hexdigest()}"
python = "{python}"
site_packages = "{site_packages}"

[mori]
kind = "git"
url = "https://example.test/ROCm/mori.git"
tag = "v1.2.2"
commit = "{h(b"mori").hexdigest()[:40]}"

[aiter]
kind = "wheel"
url = "https://example.test/amd_aiter-0.1.19-cp312-cp312-manylinux_2_28_x86_64.whl"
version = "0.1.19"
sha256 = "{h(b"aiter").hexdigest()}"
size = 1234

[flydsl]
kind = "pypi"
project = "flydsl"
version = "0.2.4"
index = "https://example.test/simple/"
filename = "flydsl-0.2.4-cp312-cp312-manylinux_2_27_x86_64.whl"
sha256 = "{h(b"flydsl").hexdigest()}"

[vllm]
kind = "git"
url = "https://example.test/raviguptaamd/vllm.git"
branch = "kimi-k3-wideep-disagg-fullsource-v3"
commit = "{h(b"vllm").hexdigest()[:40]}"

[router]
kind = "git"
url = "https://example.test/raviguptaamd/router.git"
branch = "ravgupta/discovery-dp-rank-roundrobin"
commit = "{h(b"router").hexdigest()[:40]}"

[rust]
kind = "toolchain"
version = "1.88.0"
""",
        encoding="utf-8",
    )
    return path


def _record_hash(data: bytes) -> str:
    import base64

    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def good_files(exp: Expectations) -> dict[str, tuple[bytes, int]]:
    """Every file a correct image has, as the checks see it: path -> (content, mode)."""
    sp = exp.python.site_packages.lstrip("/")
    lines = ["BUILD_SETUPTOOLS=79.0.1 (isolated build, pip 23.0.1, constraint setuptools<80)"]
    lines += [line.text for line in exp.versions.lines]
    files: dict[str, tuple[bytes, int]] = {
        VERSIONS_FILE.lstrip("/"): ("\n".join(lines).encode() + b"\n", 0o644),
        CONSTRAINT_FILE.lstrip("/"): (exp.constraint.constraints.encode(), 0o644),
        BUILD_CONSTRAINT_FILE.lstrip("/"): (exp.constraint.build_constraints.encode(), 0o644),
        APT_PACKAGES_FILE.lstrip("/"): (b"bash=5.2.15-2+b7\npython3=3.11.2-1+b1\n", 0o644),
        PYTHON_PACKAGES_FILE.lstrip("/"): (
            f"{REPINNED_PIN}=={exp.python.repinned_version}\npip==23.0.1\n".encode(),
            0o644,
        ),
        ROUTER.lstrip("/"): (
            f"#!/bin/sh\necho 'usage: vllm-router [--service-discovery {ROUTER_HELP_WORD}]'\n".encode(),
            0o755,
        ),
        CHECK_TOOL.lstrip("/"): (CHECK_TOOL_SOURCE.read_bytes(), 0o755),
        f"{sp}/aiter/__init__.py": (b"", 0o644),
        f"{sp}/aiter/ops/triton/conv/__init__.py": (b"", 0o644),
        f"{sp}/aiter_meta/__init__.py": (b"", 0o644),
    }
    for i, name in enumerate(TUNED_CONFIGS):
        root = TUNED_CONFIG_ROOTS[i % len(TUNED_CONFIG_ROOTS)]
        files[f"{sp}/{root}/configs/{name}"] = (b"token,expert,kernel\n", 0o644)
    launcher = LAUNCHER.lstrip("/").rsplit("/", 1)[0]
    # The whole package, as the build context ships it (imagebuild/render/context.py): serve.py imports it.
    for p in sorted(LAUNCHER_DIR.rglob("*")):
        if p.suffix in (".py", ".toml") and "__pycache__" not in p.parts:
            files[f"{launcher}/{p.relative_to(LAUNCHER_DIR).as_posix()}"] = (p.read_bytes(), 0o644)
    dist, version = REPINNED_PIN, exp.python.repinned_version
    package = {f"{dist}/__init__.py": f"__version__ = '{version}'\n".encode(), f"{dist}/core.py": b"X = 1\n"}
    info = f"{dist}-{version}.dist-info"
    package[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode()
    record = [f"{name},{_record_hash(data)},{len(data)}" for name, data in package.items()]
    package[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    files.update({f"{sp}/{name}": (data, 0o644) for name, data in package.items()})
    return files


def dockerfile(base: str, exp: Expectations) -> str:
    env = " \\\n    ".join(f"{k}={json.dumps(v)}" for k, v in exp.config.env.items())
    return (
        f"FROM {base}\nENTRYPOINT []\nWORKDIR {exp.config.workdir}\nENV {env}\nCOPY rootfs/ /\n"
        # The base may carry stale JIT dirs (the sample base imitates the real one).
        "RUN rm -rf /opt/vllm_cache/aiter_jit /root/.aiter && mkdir -p /root/.mori\n"
        # What the setuptools guard records for a base whose setuptools satisfies the constraint.
        f'RUN echo "{GUARD_KEY}=$(python3 -c \'import importlib.metadata as m; print(m.version("setuptools"))\')'
        f" (the image's own, satisfies setuptools{exp.constraint.setuptools_specifier})\" >> {VERSIONS_FILE}\n"
    )


def context_tar(dockerfile_text: str, files: Mapping[str, tuple[bytes, int]] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        entries = {"Dockerfile": (dockerfile_text.encode(), 0o644)}
        entries.update({f"rootfs/{k}": v for k, v in (files or {}).items()})
        for name, (data, mode) in sorted(entries.items()):
            member = tarfile.TarInfo(name)
            member.size, member.mode, member.mtime = len(data), mode, 0
            tar.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


def good_labels(exp: Expectations) -> dict[str, str]:
    return {**exp.config.labels, **dict.fromkeys(NONEMPTY_LABELS, "test")}


def build(
    client: Any,
    context: bytes,
    *,
    labels: Mapping[str, str] | None = None,
    buildargs: Mapping[str, str] | None = None,
) -> str:
    """Classic-builder build through docker-py (build args are not part of the Engine interface)."""
    image_id = None
    log = []
    for chunk in client.api.build(
        fileobj=io.BytesIO(context), custom_context=True, decode=True, rm=True, forcerm=True,
        labels=dict(labels or {}), buildargs=dict(buildargs or {}), pull=False,
    ):  # fmt: skip
        if "error" in chunk:
            msg = f"test image build failed: {chunk['error']}\n{''.join(log[-20:])}"
            raise AssertionError(msg)
        log.append(str(chunk.get("stream", "")))
        aux = chunk.get("aux")
        if isinstance(aux, dict) and "ID" in aux:
            image_id = str(aux["ID"])
    assert image_id, "".join(log[-20:])
    return image_id


@dataclass(frozen=True, kw_only=True)
class GoodImage:
    image: str  # ref or id
    pins: Path
    expectations: Expectations
    synthetic: bool
