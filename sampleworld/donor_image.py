"""The sample donor image: FROM scratch, only the site-packages trees the graft copies.

It holds a K3-aware `aiter/`, the K3-tuned MoE configs under `aiter_meta/`, and an OLDER `flydsl/` (0.2.2,
with a file 0.2.4 lacks) without any dist-info, which is what makes the re-pin after the graft necessary.
"""

from __future__ import annotations

import hashlib
import shutil

from docker.models.images import Image

import docker
from sampleworld import dockerutil, log
from sampleworld.layout import SITE_PACKAGES, SOURCES_DIR, WORLD_VERSION, StateDir

REPOSITORY = "sampleworld/donor"
LABEL = "org.imagebuild.sampleworld.donor-recipe"
TREES = ("aiter", "aiter_meta", "flydsl")

DOCKERFILE = f"""\
FROM scratch
COPY dist-packages/ {SITE_PACKAGES}/
LABEL {LABEL}="{{recipe}}"
"""


def _files() -> dict[str, bytes]:
    root = SOURCES_DIR / "donor"
    files: dict[str, bytes] = {}
    for tree in TREES:
        for path in sorted((root / tree).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files


def recipe() -> str:
    digest = hashlib.sha256(f"{WORLD_VERSION}\0{DOCKERFILE}\0".encode())
    for name, data in _files().items():
        digest.update(f"{name}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()


def ensure_donor(engine: docker.DockerClient, state: StateDir) -> Image:
    wanted = recipe()
    tag = f"{REPOSITORY}:{wanted[:16]}"
    try:
        image: Image = engine.images.get(tag)
        if image.labels.get(LABEL) == wanted:
            return image
    except docker.errors.ImageNotFound:
        pass
    context = state.build / "donor"
    if context.exists():
        shutil.rmtree(context)
    for name, data in _files().items():
        target = context / "dist-packages" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (context / "Dockerfile").write_text(DOCKERFILE.format(recipe=wanted))
    with log.step("donor: building the donor image"):
        return dockerutil.build(engine, context, tag=tag)
