"""The Docker engine API's load and error messages, read the same way by both of imagebuild's engines.

``imagebuild.engine`` (docker-py: its build, push, pull and load streams) and ``socket_engine``
(http.client, on nodes without imagebuild) send the same requests; what the replies mean is decided
once, here. Standard library only, so the shipped importer carries it and the engine imports it.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Mapping

LOADED_ID = "Loaded image ID: "  # an archive saved by image ID, as export saves
LOADED_NAME = "Loaded image: "  # a tagged archive (not one of export's)
# Docker 27 and later on the containerd store say an image they loaded but could not unpack (a full
# disk) in a line of output, not as an error: the request succeeds and `docker load` exits 0
# (measured on 28.5.2; Docker 26 made it the load's error, "failed to unpack loaded image").
UNPACK_FAILED = "Error unpacking image"

# What an engine holds of an image (``image_state``): nothing; the image, nothing more said; all of it;
# its record with part of its content missing (a load that broke off); its content, not unpacked (an
# unpack that failed).
ABSENT, HELD, WHOLE, CONTENT_MISSING, NOT_UNPACKED = "absent", "held", "whole", "content missing", "not unpacked"


def names_images_by_manifest(info: Mapping[str, Any]) -> bool:
    """Whether the engine whose ``GET /info`` this is uses the containerd image store.

    There an image ID is its manifest's digest; on graph-driver stores (and Podman) its config's.
    """
    status = {str(pair[0]): str(pair[1]) for pair in info.get("DriverStatus") or [] if len(pair) == 2}
    return status.get("driver-type") == "io.containerd.snapshotter.v1"


def tag_table(images: Any) -> dict[str, str]:
    """``GET /images/json``'s answer as {repository:tag: image ID} (``<none>:<none>`` is no tag)."""
    table: dict[str, str] = {}
    for image in images if isinstance(images, list) else []:
        for name in (image.get("RepoTags") or []) if isinstance(image, dict) else []:
            if isinstance(name, str) and name != "<none>:<none>":
                table[name] = str(image.get("Id"))
    return table


def stream_error(message: Mapping[str, Any]) -> str | None:
    """The error a JSON stream message (load, push, pull) reports, or None."""
    if "error" not in message and "errorDetail" not in message:
        return None
    detail = (message.get("errorDetail") or {}).get("message") or message.get("error")
    return str(detail or "no detail").strip()


def load_error(message: Mapping[str, Any]) -> str | None:
    """The failure a load stream message reports: the engine's error, or an unpack it failed (UNPACK_FAILED)."""
    detail = stream_error(message)
    if detail is not None:
        return detail
    for line in str(message.get("stream") or "").splitlines():
        if line.startswith(UNPACK_FAILED):
            return line.strip()
    return None


def read_load(messages: Iterable[Mapping[str, Any]], id_of: Callable[[str], str]) -> tuple[list[str], str | None]:
    """(the image IDs a load's JSON messages report, the failure they report or None); ``id_of`` looks
    up the ID of a loaded name. Read to the first failure."""
    loaded: list[str] = []
    for message in messages:
        detail = load_error(message)
        if detail is not None:
            return loaded, detail
        loaded += loaded_images(str(message.get("stream") or ""), id_of)
    return loaded, None


def image_state(inspected: Mapping[str, Any], image_id: str) -> str:
    """WHOLE, CONTENT_MISSING or NOT_UNPACKED, as ``GET /images/{image_id}/json?manifests=1`` says of
    the image's own manifest; HELD where the answer does not say (engines before API 1.48, graph
    drivers, an image named by an index)."""
    for summary in inspected.get("Manifests") or []:
        if not isinstance(summary, dict) or summary.get("ID") != image_id or summary.get("Kind") != "image":
            continue
        available, data = summary.get("Available"), summary.get("ImageData")
        size = data.get("Size") if isinstance(data, dict) else None
        unpacked = size.get("Unpacked") if isinstance(size, dict) else None
        if not isinstance(available, bool) or type(unpacked) is not int:
            return HELD
        if not available:
            return CONTENT_MISSING
        return NOT_UNPACKED if unpacked == 0 else WHOLE  # every image imagebuild makes has files
    return HELD


def response_error(body: bytes) -> str:
    """The message of an error response's body (``{"message": ...}``), or the start of its text."""
    try:
        message = json.loads(body)
    except ValueError:
        return body.decode(errors="replace").strip()[:300] or "no detail"
    if not isinstance(message, dict):
        return str(message)
    detail = message.get("message") or stream_error(message)
    return str(detail or message).strip()


def loaded_images(text: str, id_of: Callable[[str], str]) -> list[str]:
    """The image IDs a load stream's text reports; ``id_of`` looks up the ID of a loaded name."""
    ids: list[str] = []
    for line in text.splitlines():
        if line.startswith(LOADED_ID):
            ids.append(line[len(LOADED_ID) :].strip())
        elif line.startswith(LOADED_NAME):
            ids.append(id_of(line[len(LOADED_NAME) :].strip()))
    return ids
