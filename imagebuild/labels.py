"""The labels a built image carries: OCI annotations of the checkout and one label per pin.

The checkout's facts come from git (three local queries, no network). A label
never fails a build: outside a git checkout, or without git, they fall back to
"unknown" and the checkout's path.
"""

from __future__ import annotations

from pathlib import Path

from imagebuild import __version__
from imagebuild.errors import CommandError
from imagebuild.layout import ARCH_LABEL, OCI_LABEL_PREFIX, PIN_LABEL_PREFIX, VERSION_LABEL
from imagebuild.project import Inputs, Project
from imagebuild.util.run import run_command

GIT_TIMEOUT_S = 10


def image_labels(project: Project, inputs: Inputs) -> dict[str, str]:
    """OCI labels plus one label per pin with its immutable identity (UnpinnedError when one has none)."""
    commit, _, committed = _git(project.root, "log", "-1", "--format=%H%n%cI").partition("\n")
    revision = commit or "unknown"
    if _git(project.root, "status", "--porcelain"):
        revision += "-dirty"
    labels = {
        f"{OCI_LABEL_PREFIX}source": _git(project.root, "config", "--get", "remote.origin.url")
        or str(project.root),
        f"{OCI_LABEL_PREFIX}revision": revision,
        # The commit time, not the build time: a rebuild of the same commit labels the same.
        f"{OCI_LABEL_PREFIX}created": committed or "unknown",
        f"{OCI_LABEL_PREFIX}version": f"{inputs.arch.name}-{revision[:12]}",
        ARCH_LABEL: inputs.arch.name,
        VERSION_LABEL: __version__,
    }
    for pin in inputs.pins:
        labels[f"{PIN_LABEL_PREFIX}{pin.name}"] = pin.require_identity()
    return labels


def _git(root: Path, *args: str) -> str:
    """Output of a git query about the checkout, or '' when git or the checkout cannot answer."""
    try:
        done = run_command(["git", "-C", str(root), *args], timeout=GIT_TIMEOUT_S, check=False)
    except CommandError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""
