"""What a build on Podman gives, and the stale labels buildah's cache can leave: said and checked.

Moved out of imagebuild.build.core (a pure move) to keep that module one screenful of the build's order.
"""

from __future__ import annotations

from pathlib import Path

from imagebuild.engine.interface import Engine, EngineStore
from imagebuild.errors import BuildError


def podman_identity(store: EngineStore) -> str:
    """What a build on Podman gives: the image, but not the identity Docker engines give the same inputs.

    Measured on Podman 4.3.1 (buildah 1.28.2) against Docker 20.10 from one checkout: every layer from
    the first RUN's on is the same bytes, but buildah commits no layer for WORKDIR (its directory goes
    into the next layer), commits an empty /etc/hosts with the first RUN, words every history entry
    its own way and labels the image io.buildah.version.
    """
    return (
        f"{store.name} builds with buildah, not Docker's classic builder: the image builds, verifies and "
        "normalises, but its identity is not the one Docker engines give these inputs (no layer for WORKDIR, "
        "an empty /etc/hosts committed, buildah's history, label io.buildah.version); build on Docker for that identity"
    )


def check_labels(
    engine: Engine, store: EngineStore, image_id: str, labels: dict[str, str], log: Path
) -> None:
    """BuildError (nothing tagged) when the built image's labels are not the ones asked for.

    Buildah (Podman 4.3.1: 1.28.2) reuses a cached LABEL step whose ARGs now have other values
    (containers/buildah#5501): a cached rebuild after a commit keeps the old commit's labels.
    """
    held = engine.inspect_image(image_id).labels
    wrong = [name for name, value in labels.items() if held.get(name) != value]
    if wrong:
        name = wrong[0]
        msg = (
            f"{store.name} reused a cached step built with other build args: {image_id[:19]} has label "
            f"{name}={held.get(name)!r}, not {labels[name]!r} ({len(wrong)} label(s) stale; buildah leaves "
            f"ARG values out of a LABEL step's cache key); nothing was tagged; build again with --no-cache (log: {log})"
        )
        raise BuildError(msg)
