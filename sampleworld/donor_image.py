"""The sample donor images: FROM scratch, only the site-packages trees the graft copies.

The MI300X donor (pins [donor], gfx942) holds a K3-aware `aiter/`, the K3-tuned MoE configs under
`aiter_meta/`, and an OLDER `flydsl/` (0.2.2, with a file 0.2.4 lacks) without any dist-info, which is
what makes the re-pin after the graft necessary. It is built by the engine and locked per machine.

The MI355X donor (pins [donor_mi355x], gfx950) is pinned by digest in sampleworld/pins.toml, as the real
pins.toml pins the reference's, so it is written byte for byte (oci_image.py) and pushed without an
engine. The real MI300X donor is "this same image plus three vLLM .py files and one ENV", so its
trees are the MI300X stand-in's, built for gfx942;gfx950: the same `aiter/`, configs and flydsl
0.2.2 (which gfx950 keeps: no re-pin), plus the gfx950 prebuilt kernels of sources/donor_mi355x/.
"""

from __future__ import annotations

import hashlib
import shutil
from typing import TYPE_CHECKING

from sampleworld import log, oci_image
from sampleworld.layout import (
    DONOR_MI355X_REPOSITORY,
    DONOR_MI355X_TAG,
    REGISTRY,
    SITE_PACKAGES,
    SOURCES_DIR,
    WORLD_VERSION,
    StateDir,
)

if TYPE_CHECKING:  # docker-py only where the engine builds the MI300X donor
    from docker.models.images import Image

    import docker

REPOSITORY = "sampleworld/donor"
LABEL = "org.imagebuild.sampleworld.donor-recipe"
TREES = ("aiter", "aiter_meta", "flydsl")

DOCKERFILE = f"""\
FROM scratch
COPY dist-packages/ {SITE_PACKAGES}/
LABEL {LABEL}="{{recipe}}"
"""


def _files(source: str = "donor") -> dict[str, bytes]:
    root = SOURCES_DIR / source
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
    import docker
    from sampleworld import dockerutil

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


# The MI355X donor: its date and file times are the stand-in repositories' (gitrepos.EPOCH).
MI355X_CREATED = "2026-01-01T00:00:00Z"
MI355X_MTIME = 1767225600
MI355X_LABEL = "org.imagebuild.sampleworld.stand-in"


def mi355x_image() -> oci_image.OciImage:
    """The MI355X donor stand-in: the MI300X donor's trees with the gfx950 kernels, as one layer."""
    files = {**_files("donor"), **_files("donor_mi355x")}
    return oci_image.single_layer_image(
        {f"{SITE_PACKAGES.lstrip('/')}/{name}": data for name, data in sorted(files.items())},
        created=MI355X_CREATED,
        mtime=MI355X_MTIME,
        labels={MI355X_LABEL: "MI355X donor vllm/vllm-openai-rocm:kimi-k3 (trees for gfx942;gfx950)"},
        history=f"COPY {', '.join(TREES)} {SITE_PACKAGES}/ (sampleworld/donor_image.py)",
    )


def ensure_donor_mi355x() -> str:
    """Push the MI355X donor unless the registry serves its digest under its tag; returns the digest."""
    image = mi355x_image()
    repository = DONOR_MI355X_REPOSITORY.removeprefix(f"{REGISTRY}/")
    if oci_image.served_digest(repository, DONOR_MI355X_TAG) == image.digest:
        log.info(f"registry: {DONOR_MI355X_REPOSITORY}:{DONOR_MI355X_TAG} is current ({image.digest[:19]})")
        return image.digest
    with log.step(f"registry: pushing {DONOR_MI355X_REPOSITORY}:{DONOR_MI355X_TAG} ({image.digest[:19]})"):
        oci_image.push(image, repository, DONOR_MI355X_TAG)
    return image.digest
