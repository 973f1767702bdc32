"""What a push or pull stream of the Docker engine API says, read into events imagebuild shows.

Standard wire formats, shared by the Docker engine, the engine over http.client and the fake.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class PushEvent:
    """One message of a push stream: a layer's progress, or the pushed manifest's digest at the end."""

    layer: str = ""  # short layer id; "" for messages about the whole image
    status: str = ""  # Preparing, Pushing, Pushed, Layer already exists, ...
    current: int = 0  # bytes of this layer sent so far
    total: int = 0  # size of this layer (0 when the engine does not say)
    digest: str | None = None  # sha256:... of the pushed manifest (last event of a success)


@dataclass(frozen=True, kw_only=True)
class PullEvent:
    """One message of a pull stream: a layer's status and bytes, or a message about the whole image."""

    layer: str = ""  # short layer id; "" for messages about the whole image ("Digest: ...", "Status: ...")
    status: str = ""  # Pulling fs layer, Waiting, Downloading, Verifying Checksum, Download complete,
    # Extracting, Pull complete, Already exists
    current: int = 0  # bytes of this layer downloaded (or extracted) so far
    total: int = 0  # size of this layer (0 when the engine does not say)


PullListener = Callable[[PullEvent], None]


def pull_event(message: Mapping[str, Any]) -> PullEvent:
    """One message of a pull stream that is not an error, as a PullEvent.

    The wire format of ``POST /images/create``: ``{"id": layer, "status": ..., "progressDetail":
    {"current": n, "total": n}, "progress": "[==>  ] 1MB/4MB"}`` per layer, and ``{"status": ...}``
    without ``id`` about the image (its digest, "Downloaded newer image for ...").
    """
    progress = message.get("progressDetail") or {}
    return PullEvent(
        layer=str(message.get("id") or ""),
        status=str(message.get("status") or ""),
        current=int(progress.get("current") or 0),
        total=int(progress.get("total") or 0),
    )


PUSHED_STATUS = re.compile(r"^\S+: digest: (sha256:[0-9a-f]{64}) size: \d+$")


def push_event(message: Mapping[str, Any]) -> PushEvent:
    """One message of a push stream that is not an error, as a PushEvent.

    The wire format of ``POST /images/{name}/push``: ``{"id": layer, "status": ...,
    "progressDetail": {"current": n, "total": n}}`` for a layer, and ``{"aux": {"Tag": ...,
    "Digest": "sha256:...", "Size": n}}`` once the manifest is pushed. Podman 4.3 sends no ``aux``:
    only the status line Docker sends before it, ``{"status": "TAG: digest: sha256:... size: n"}``.
    """
    aux = message.get("aux")
    if isinstance(aux, dict) and aux.get("Digest"):
        return PushEvent(digest=str(aux["Digest"]))
    pushed = PUSHED_STATUS.match(str(message.get("status") or ""))
    if pushed:
        return PushEvent(digest=pushed[1])
    layer = pull_event(message)  # a layer's message has the same shape in both streams
    return PushEvent(layer=layer.layer, status=layer.status, current=layer.current, total=layer.total)
