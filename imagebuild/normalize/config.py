"""The normalised image's config: input-derived times, no build-only fields, a canonical history.

A pure function of the built config, the plan and the normalised layers, so its sha256 (the image's
identity) is too, on every engine. What the engine, the builder version or the client puts into a
config is made canonical here:

* which step made which layer is read from the history, not counted: a step that changes nothing
  makes an empty layer on a graph-driver store and none on the containerd image store; empty build
  layers are dropped and their step marked ``empty_layer``, as the containerd store does;
* Docker's empty container-config fields (Hostname, Tty, ...) and null ones (Cmd, Entrypoint) are
  left out, as the containerd store leaves them out;
* the classic builder's ``COPY dir:<hash>`` (also ``file:`` and ``multi:``, and for ADD) hashes the
  tar the client sent with a builder-specific recipe: 20.10 and 26 give other hashes for the same
  files. It names the normalised layer's diffID instead, ``COPY dir@sha256:<diffID>``: a digest of
  the copied paths, modes and contents (their times clamped), the same wherever it was built.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from imagebuild.pins.epoch import format_epoch

# Fields of a classic-builder config that name the build's last container, its
# host and the engine's version: they differ on every build and say nothing
# about the image. BuildKit does not write them; Docker 25 dropped them too.
BUILD_ONLY_FIELDS = ("container", "container_config", "docker_version")
# Docker's container-config fields a graph-driver store writes into the image config even when they
# are empty (Hostname "", Tty false, ...) and the containerd store leaves out; none is in the OCI
# config but User. Left out when empty; Image, the unnormalised parent's ID, always.
EMPTY_DEFAULT_FIELDS = (
    "Hostname",
    "Domainname",
    "User",
    "AttachStdin",
    "AttachStdout",
    "AttachStderr",
    "Tty",
    "OpenStdin",
    "StdinOnce",
)
STEP_INSTRUCTIONS = frozenset({"RUN", "COPY", "ADD", "WORKDIR"})  # what BuildKit counts as a step
_METADATA = re.compile(r" -c #\(nop\) +([A-Z]+)\b")  # the classic builder's record of a non-RUN instruction
_COPIED = re.compile(r"(#\(nop\) (?:COPY|ADD) )(dir|file|multi):[0-9a-f]{64}")
EMPTY = "empty"  # what a COPY that made no layer names instead of a diffID


class HistoryMismatch(Exception):
    """The config's history does not fit the Dockerfile's steps; the message says how."""


@dataclass(frozen=True, kw_only=True)
class BuildLayer:
    """A layer the build made: the history entry of the step that made it, and that step's epoch."""

    history: int  # index into the config's history
    epoch: int
    copies_context: bool = False  # every entry gets the epoch, not only later ones (RenderedStep.copies_context)


def build_layers(
    config: Mapping[str, Any],
    *,
    base_history: int,
    base_layers: int,
    layers: int,
    epochs: Sequence[int],
    what: str,
    context_copies: Sequence[bool] = (),
    prefix: bool = False,
) -> tuple[BuildLayer, ...]:
    """Which step made each of the image's ``layers`` above its base, from the config's history
    (``prefix``: an intermediate image of the build, made by the first of the steps only)."""
    numbered = list(enumerate(config.get("history") or []))[base_history:]
    steps = [index for index, entry in numbered if _is_step(entry)]
    if prefix and len(steps) <= len(epochs):
        epochs, context_copies = epochs[: len(steps)], context_copies[: len(steps)]
    if len(steps) != len(epochs):
        msg = f"{what}: its history has {len(steps)} build steps, but the Dockerfile makes {len(epochs)}"
        raise HistoryMismatch(msg)
    epoch_of = dict(zip(steps, epochs, strict=True))
    copies = dict(zip(steps, context_copies or [False] * len(steps), strict=True))
    made = [index for index, entry in numbered if not entry.get("empty_layer")]
    if len(made) != layers - base_layers:
        msg = f"{what}: the image has {layers - base_layers} layers above its base, but its history names {len(made)}"
        raise HistoryMismatch(msg)
    return tuple(BuildLayer(history=index, epoch=epoch_of[index], copies_context=copies[index]) for index in made)


def _is_step(entry: Mapping[str, Any]) -> bool:
    """A history entry of a step (RUN, COPY, ADD, WORKDIR): one that may make a layer."""
    if not entry.get("empty_layer"):
        return True
    match = _METADATA.search(str(entry.get("created_by") or ""))
    return (match[1] if match else "RUN") in STEP_INSTRUCTIONS


def canonical_created_by(created_by: str, diff_id: str) -> str:
    """``... COPY dir:<builder's hash> in /x`` -> ``... COPY dir@<diffID> in /x``; other entries as they are."""
    return _COPIED.sub(lambda m: f"{m[1]}{m[2]}@{diff_id or EMPTY}", created_by)


def normalized_config(
    config: dict[str, Any],
    diff_ids: Sequence[str],
    *,
    base_history: int,
    created: int,
    made: Mapping[int, str] | None = None,
) -> bytes:
    """The config bytes of the normalised image.

    ``made`` maps the history entry of each step that made a layer to the normalised layer's diffID,
    or to "" when that layer was empty and is dropped. Keys are sorted and the JSON compact, so the
    bytes depend on the content only, not on the engine that wrote the original.
    """
    new = copy.deepcopy(config)
    new["rootfs"] = {**new.get("rootfs", {}), "diff_ids": list(diff_ids)}
    stamp = format_epoch(created)
    new["created"] = stamp
    made = made or {}
    history = new.get("history") or []
    for index in range(base_history, len(history)):
        entry = history[index]
        entry["created"] = stamp
        diff_id = made.get(index, "")
        if index in made and not diff_id:
            entry["empty_layer"] = True
        if "created_by" in entry:
            entry["created_by"] = canonical_created_by(str(entry["created_by"]), diff_id)
    for key in BUILD_ONLY_FIELDS:
        new.pop(key, None)
    container = new.get("config")
    if isinstance(container, dict):
        container.pop("Image", None)  # the unnormalised parent's ID: another image, and varies per build
        for key in [k for k, v in container.items() if v is None]:  # null and absent say the same
            del container[key]
        for key in EMPTY_DEFAULT_FIELDS:
            if key in container and container[key] in ("", False):
                del container[key]
    return json.dumps(new, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
