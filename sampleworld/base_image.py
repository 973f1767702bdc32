"""The sample base image: a debootstrapped Debian bookworm standing in for rocm/vllm-dev:ci_base-....

Two images, each cached by a hash of its recipe (tag and label), because debootstrap takes minutes and the
configuration layer takes seconds:
  sampleworld/base-rootfs:<hash>  `docker import` of `debootstrap --variant=minbase --include=...`
  sampleworld/base:<hash>         FROM the rootfs: host CA bundle, pip.conf -> sample index, and the
                                  hazards of the real base (PYTORCH_ROCM_ARCH for three archs, stale JIT dirs)
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from docker.models.images import Image

import docker
from sampleworld import dockerutil, log, proc
from sampleworld.apt_archive import KEYRING_PATH, ArchiveDirs, ensure_key
from sampleworld.errors import SampleWorldError
from sampleworld.layout import SIMPLE_URL, WORLD_VERSION, StateDir

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# What the real base brings and the build's step 4 (re)installs, plus cargo so step 9 skips rustup.
# Not apt_archive.DOWNLOADED (ccache): step 4 downloads it from the snapshot, so apt checks it there.
PACKAGES = (
    "python3",
    "python3-pip",
    "python3-setuptools",
    "python3-wheel",
    "python3-venv",
    "git",
    "build-essential",
    "cmake",
    "ninja-build",
    "libssl-dev",
    "pkg-config",
    "curl",
    "ca-certificates",
    "cargo",
)
# Trimmed after debootstrap: package caches and docs nobody in the build reads (smaller push and pull).
TRIM = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/info")
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
ROOTFS_REPOSITORY = "sampleworld/base-rootfs"
BASE_REPOSITORY = "sampleworld/base"
ROOTFS_LABEL = "org.imagebuild.sampleworld.rootfs-recipe"
BASE_LABEL = "org.imagebuild.sampleworld.base-recipe"

PIP_CONF = f"""\
# The sample world's package index (python -m sampleworld up); stands in for PyPI.
[global]
index-url = {SIMPLE_URL}
trusted-host = 127.0.0.1
disable-pip-version-check = true
"""

SOURCES_LIST = f"""\
deb {MIRROR} {SUITE} main
deb {MIRROR} {SUITE}-updates main
deb http://deb.debian.org/debian-security {SUITE}-security main
"""

DOCKERFILE = """\
FROM {rootfs}
# Containers reach https hosts through this machine's trust store; the second copy survives
# update-ca-certificates (run by apt when ca-certificates is upgraded).
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY ca-certificates.crt /usr/local/share/ca-certificates/sampleworld-host-bundle.crt
COPY pip.conf /etc/pip.conf
COPY sources.list /etc/apt/sources.list
# The snapshot archive's key (apt_archive.py): what the sample apt pin's signed_by names.
COPY snapshot-archive-keyring.gpg {keyring}
# Root pip installs go to /usr/local/lib/python3.11/dist-packages, as on the real base (PEP 668 lifted).
# The stale JIT dirs imitate the real base's caches built against an older AITER.
RUN rm -f /usr/lib/python3.11/EXTERNALLY-MANAGED \\
 && mkdir -p /opt/vllm_cache/aiter_jit /root/.aiter \\
 && echo 'stale JIT object built against an older AITER' > /opt/vllm_cache/aiter_jit/stale.so \\
 && echo 'stale' > /root/.aiter/stale
# The real base sets this; an ARG of the same name in a FROM-it Dockerfile is shadowed by it.
ENV PYTORCH_ROCM_ARCH="gfx90a;gfx942;gfx950"
LABEL {label}="{recipe}"
CMD ["bash"]
"""


def rootfs_recipe() -> str:
    recipe = {
        "world": WORLD_VERSION,
        "suite": SUITE,
        "mirror": MIRROR,
        "variant": "minbase",
        "include": PACKAGES,
        "trim": TRIM,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def _context_files(state: StateDir, rootfs_ref: str, recipe: str) -> dict[str, bytes]:
    if not HOST_CA_BUNDLE.is_file():
        msg = f"{HOST_CA_BUNDLE} is missing; install ca-certificates on this machine"
        raise SampleWorldError(msg)
    return {
        "Dockerfile": DOCKERFILE.format(
            rootfs=rootfs_ref, label=BASE_LABEL, recipe=recipe, keyring=KEYRING_PATH
        ).encode(),
        "pip.conf": PIP_CONF.encode(),
        "sources.list": SOURCES_LIST.encode(),
        "ca-certificates.crt": HOST_CA_BUNDLE.read_bytes(),
        "snapshot-archive-keyring.gpg": ensure_key(ArchiveDirs(state)).read_bytes(),
    }


def base_recipe(state: StateDir, rootfs_recipe_hash: str) -> str:
    """The base's recipe hash: the rootfs's, and every file of its context (this world's archive key too)."""
    digest = hashlib.sha256(f"{WORLD_VERSION}\0{rootfs_recipe_hash}\0".encode())
    for name, data in sorted(_context_files(state, "<rootfs>", "<recipe>").items()):
        digest.update(f"{name}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()


def _cached(engine: docker.DockerClient, repository: str, recipe: str, label: str) -> Image | None:
    """The image tagged for this recipe, if its label agrees (derived images inherit the label, tags not)."""
    try:
        image: Image = engine.images.get(f"{repository}:{recipe[:16]}")
    except docker.errors.ImageNotFound:
        return None
    return image if image.labels.get(label) == recipe else None


def _unmount_below(root: Path) -> None:
    # debootstrap mounts /proc and friends in the target; an interrupted run leaves them mounted.
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(f"{root}/")), reverse=True):
        proc.run(["umount", "-l", mount])


def _debootstrap(state: StateDir) -> Path:
    target = state.build / "rootfs"
    if target.exists():
        _unmount_below(target)
        shutil.rmtree(target)
    include = ",".join(PACKAGES)
    with log.step(f"base: debootstrap --variant=minbase {SUITE} (takes a few minutes)"):
        proc.run(
            ["debootstrap", "--variant=minbase", f"--include={include}", SUITE, str(target), MIRROR],
            timeout=1800,
        )
    _unmount_below(target)
    for relative in TRIM:
        for child in (target / relative).glob("*"):
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    tarball = state.build / "rootfs.tar"
    with log.step("base: packing the root file system"):
        proc.run(
            [
                "tar",
                "--numeric-owner",
                "--exclude=./dev/*",
                "--exclude=./proc/*",
                "--exclude=./sys/*",
                "-C",
                str(target),
                "-cf",
                str(tarball),
                ".",
            ],
            timeout=1200,
        )
    shutil.rmtree(target)
    return tarball


def ensure_rootfs(engine: docker.DockerClient, state: StateDir) -> Image:
    recipe = rootfs_recipe()
    cached = _cached(engine, ROOTFS_REPOSITORY, recipe, ROOTFS_LABEL)
    if cached is not None:
        return cached
    tarball = _debootstrap(state)
    with log.step("base: docker import of the root file system"):
        image = dockerutil.import_rootfs(
            engine,
            tarball,
            repository=ROOTFS_REPOSITORY,
            tag=recipe[:16],
            changes=[f"LABEL {ROOTFS_LABEL}={recipe}"],
        )
    tarball.unlink()
    return image


def ensure_base(engine: docker.DockerClient, state: StateDir) -> Image:
    """The configured sample base image, built only when its recipe changed."""
    ensure_rootfs(engine, state)
    recipe = base_recipe(state, rootfs_recipe())
    cached = _cached(engine, BASE_REPOSITORY, recipe, BASE_LABEL)
    if cached is not None:
        return cached
    context = state.build / "base"
    if context.exists():
        shutil.rmtree(context)
    context.mkdir(parents=True)
    rootfs_ref = f"{ROOTFS_REPOSITORY}:{rootfs_recipe()[:16]}"
    for name, data in _context_files(state, rootfs_ref, recipe).items():
        (context / name).write_bytes(data)
    with log.step("base: configuring the base image"):
        return dockerutil.build(engine, context, tag=f"{BASE_REPOSITORY}:{recipe[:16]}")
