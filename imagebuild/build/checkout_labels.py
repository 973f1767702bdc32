"""The checkout's labels: its public remote, revision and commit time, asked of git at build time.

They reach the image as build args (``imagebuild.render.labels`` writes the LABEL that reads them).
Three local git queries, no network. A missing fact never fails a build: outside a git checkout,
or without git, they fall back to "unknown" and the checkout's path. Anyone who can pull the image
reads its labels, so the remote URL loses any credentials in it and a value that still looks like a
credential is refused.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from imagebuild import __version__
from imagebuild.errors import CommandError
from imagebuild.inputs.layout import (
    ARCH_LABEL,
    CHECKOUT_LABEL_ARGS,
    OCI_LABEL_PREFIX,
    PIN_LABEL_PREFIX,
    VERSION_LABEL,
)
from imagebuild.inputs.values import escape_controls
from imagebuild.log import logger
from imagebuild.project import Inputs, Project
from imagebuild.render.labels import check_label_values
from imagebuild.util.run import run_command

GIT_TIMEOUT_S = 10


def image_labels(project: Project, inputs: Inputs) -> dict[str, str]:
    """The checkout's labels plus one label per pin with its identity (UnpinnedError when one has none)."""
    labels = checkout_labels(project, inputs.arch.name) | {
        ARCH_LABEL: inputs.arch.name,
        VERSION_LABEL: __version__,
    }
    for pin in inputs.pins:
        labels[f"{PIN_LABEL_PREFIX}{pin.name}"] = pin.require_identity()
    check_label_values(labels)
    return labels


def checkout_build_args(labels: dict[str, str]) -> dict[str, str]:
    """The build args that carry the checkout's labels into the Dockerfile's LABEL."""
    return {arg: labels[label] for label, arg in CHECKOUT_LABEL_ARGS.items()}


def checkout_labels(project: Project, arch: str) -> dict[str, str]:
    """The OCI labels of the checkout: its public remote, revision (``-dirty`` when edited), commit time."""
    # Three independent local queries: run them at once rather than one process after another.
    with ThreadPoolExecutor(max_workers=3) as pool:
        log, status, remote = pool.map(
            lambda args: _git(project.root, *args),
            [
                ("log", "-1", "--format=%H%n%cI"),
                ("status", "--porcelain"),
                ("config", "--get", "remote.origin.url"),
            ],
        )
    commit, _, committed = log.partition("\n")
    if not commit and (project.root / ".git").exists():
        _warn_git_refused(project.root)
    revision = commit or "unknown"
    if status:
        revision += "-dirty"
    labels = {
        f"{OCI_LABEL_PREFIX}source": public_url(remote) or str(project.root),
        f"{OCI_LABEL_PREFIX}revision": revision,
        # The commit time, not the build time: a rebuild of the same commit labels the same.
        f"{OCI_LABEL_PREFIX}created": committed or "unknown",
        f"{OCI_LABEL_PREFIX}version": f"{arch}-{revision[:12]}",
    }
    check_label_values(labels)  # they reach the LABEL as build args: one line each, no credential
    return labels


def public_url(url: str) -> str:
    """A remote URL without credentials: user info, query and fragment dropped.

    https://user:token@host/x?private_token=t -> https://host/x (CI systems put tokens in
    either place); scp-like user@host:path -> host:path.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return ""  # not a URL we can vouch for: the caller falls back to the checkout's path
    if not parts.scheme or not parts.netloc:
        scp = re.fullmatch(r"[^@/\s]+@([^:/\s]+:.*)", url)
        return scp[1] if scp else url
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port else host
    return urlunsplit(parts._replace(netloc=netloc, query="", fragment=""))


def _warn_git_refused(root: Path) -> None:
    """A checkout git would not read (another user's, which git calls of dubious ownership): said,
    since its labels, and so the image's identity, then differ from a build of the same commit."""
    try:
        done = run_command(["git", "-C", str(root), "rev-parse", "HEAD"], timeout=GIT_TIMEOUT_S, check=False)
        why = next((line for line in done.stderr.splitlines() if line.strip()), "")
    except CommandError as e:
        why = str(e)
    logger.warning(
        "imagebuild: warning: git could not read the checkout at %s (%s): its revision and commit time "
        "are labelled \"unknown\", so the image differs from one built of the same commit where git can",
        root, escape_controls(why.removeprefix("fatal: ")[:300]) or "no reason given",
    )


def _git(root: Path, *args: str) -> str:
    """Output of a git query about the checkout, or '' when git or the checkout cannot answer."""
    try:
        done = run_command(["git", "-C", str(root), *args], timeout=GIT_TIMEOUT_S, check=False)
    except CommandError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""
