"""The labels a built image carries: OCI annotations of the checkout and one label per pin.

Most values are fixed by the inputs (a pin's identity, the arch, imagebuild's
version, the inputs digest) and are written into the Dockerfile's closing LABEL.
The checkout's facts (remote, revision, commit time) cannot be: a committed file
cannot hold its own commit. Those labels take their values from build ARGs
(imagebuild.layout.CHECKOUT_LABEL_ARGS) that ``imagebuild build`` passes; a plain
``docker build`` passes them by hand (README) or records "unknown".

The checkout's facts come from git (three local queries, no network). A missing
fact never fails a build: outside a git checkout, or without git, they fall back
to "unknown" and the checkout's path. Anyone who can pull the image reads its
labels, so the remote URL loses any credentials in it and a value that still
looks like a credential is refused.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from imagebuild import __version__
from imagebuild.errors import CommandError, ConfigError
from imagebuild.layout import (
    ARCH_LABEL,
    CHECKOUT_LABEL_ARGS,
    CHECKOUT_LABEL_DEFAULT,
    OCI_LABEL_PREFIX,
    PIN_LABEL_PREFIX,
    VERSION_LABEL,
)
from imagebuild.project import Inputs, Project
from imagebuild.secrets import value_secret_reason
from imagebuild.util.run import run_command
from imagebuild.values import control_problem, dockerfile_literal, quoted_template, shown

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


def fixed_labels(inputs: Inputs, extra: dict[str, str]) -> dict[str, str]:
    """The labels the inputs fix, for the Dockerfile; a pin without an identity says so loudly."""
    labels = {ARCH_LABEL: inputs.arch.name, VERSION_LABEL: __version__, **extra}
    for pin in inputs.pins:
        labels[f"{PIN_LABEL_PREFIX}{pin.name}"] = pin.identity or f"UNPINNED {pin.tracked}"
    check_label_values(labels)
    return labels


def checkout_build_args(labels: dict[str, str]) -> dict[str, str]:
    """The build args that carry the checkout's labels into the Dockerfile's LABEL."""
    return {arg: labels[label] for label, arg in CHECKOUT_LABEL_ARGS.items()}


def label_block(fixed: dict[str, str]) -> str:
    """The Dockerfile's closing ARGs and LABEL: fixed values literally, the checkout's from build args.

    Last, so a new revision changes only this metadata-only layer. One LABEL instruction, not the
    engine's labels option: the classic builder commits each of those as a step of its own.
    A fixed value is a Dockerfile literal (no ``$`` expands); a checkout label is the one
    reference ``"${ARG}"``, which docker substitutes without re-reading quotes.
    """
    check_label_values(fixed)
    values = {key: dockerfile_literal(value) for key, value in fixed.items()}
    for label, arg in CHECKOUT_LABEL_ARGS.items():
        values[label] = quoted_template(f"${{{arg}}}")
    args = "".join(
        f"ARG {arg}={dockerfile_literal(CHECKOUT_LABEL_DEFAULT)}\n" for arg in CHECKOUT_LABEL_ARGS.values()
    )
    pairs = " \\\n      ".join(f"{dockerfile_literal(k)}={values[k]}" for k in sorted(values))
    return (
        "\n# Labels. The inputs fix every value but the checkout's (remote, revision, commit time), which\n"
        "# a committed file cannot hold: `imagebuild build` passes them as these build args (plain\n"
        f"# docker: see the README); without them they read {CHECKOUT_LABEL_DEFAULT!r}.\n"
        f"{args}LABEL {pairs}\n"
    )


def check_label_values(labels: dict[str, str]) -> None:
    """Every label key and value is one line of text with no credential in it (ConfigError otherwise)."""
    for key, value in labels.items():
        problem = control_problem(key) or control_problem(value)
        if problem:
            msg = f"label {shown(key)} = {shown(value)}: {problem}; control characters are not allowed in a label"
            raise ConfigError(msg)
    refuse_credentials(labels)


def refuse_credentials(labels: dict[str, str]) -> None:
    for key, value in labels.items():
        reason = value_secret_reason(value, f"image label {key}")
        if reason:
            msg = f"{reason}: labels are readable by anyone who can pull the image; remove the credential from its source"
            raise ConfigError(msg)


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


def _git(root: Path, *args: str) -> str:
    """Output of a git query about the checkout, or '' when git or the checkout cannot answer."""
    try:
        done = run_command(["git", "-C", str(root), *args], timeout=GIT_TIMEOUT_S, check=False)
    except CommandError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""
