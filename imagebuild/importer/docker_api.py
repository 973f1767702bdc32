"""The Docker engine API's load and error messages, read the same way by both of imagebuild's engines.

``imagebuild.engine`` (docker-py: its build, push, pull and load streams) and ``socket_engine``
(http.client, on nodes without imagebuild) send the same requests; what the replies mean is decided
once, here. Standard library only, so the shipped importer carries it and the engine imports it.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

LOADED_ID = "Loaded image ID: "  # an archive saved by image ID, as export saves
LOADED_NAME = "Loaded image: "  # a tagged archive (not one of export's)


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
