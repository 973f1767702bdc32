"""How ``build --pull`` shows a pull: per layer, bytes and rate, as ``docker pull`` does.

On a terminal one line per layer is redrawn in place (status, bytes of total, rate); otherwise a
line every 30 s (what a CI log can hold for a 1 GB base): layers done, bytes of the known total,
the overall rate, and each layer still downloading with its bytes. Either way a summary line ends
the pull. The engine's stream (imagebuild.engine.transfer_events.pull_event) says per layer
"Pulling fs layer", "Waiting", "Downloading" (bytes so far of the layer's size), "Download
complete", "Extracting", "Pull complete" or "Already exists".
"""

from __future__ import annotations

import shutil
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from imagebuild.build.stream import ANSI_RE
from imagebuild.engine.interface import Engine
from imagebuild.engine.transfer_events import PullEvent
from imagebuild.log import format_duration
from imagebuild.util.clock import Clock

if TYPE_CHECKING:  # progress imports this module
    from imagebuild.build.progress import BuildProgress
    from imagebuild.project import Inputs

REPORT_S = 30.0  # not a terminal: at most one progress line this often
REDRAW_S = 0.1  # a terminal: at most this often
DOWNLOADED = ("Download complete", "Verifying Checksum", "Extracting", "Pull complete")
DONE = ("Pull complete", "Already exists")


class Stream(Protocol):
    def write(self, text: str, /) -> int: ...
    def flush(self) -> None: ...


@dataclass(kw_only=True)
class LayerState:
    status: str = ""
    downloaded: int = 0  # bytes
    size: int = 0  # 0: not known yet
    started: float | None = None  # when its first bytes came


def format_bytes(count: float) -> str:
    """Decimal units, as docker prints them: 512B, 12.3kB, 45.6MB, 1.02GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.3g}{unit}"
    return f"{int(count)}B"


class PullProgress:
    """The listener an engine's ``pull`` tells each message; ``close`` when the pull ended."""

    def __init__(
        self,
        stream: Stream,
        reference: str,
        clock: Clock,
        *,
        tty: bool,
        report_s: float = REPORT_S,
        width: int | None = None,
    ) -> None:
        self._stream, self._reference, self._clock = stream, reference, clock
        self._tty, self._report_s, self._width = tty, report_s, width
        self._lock = threading.Lock()
        self._layers: dict[str, LayerState] = {}
        self._started = clock.now()
        self._last_report = self._started
        self._last_draw = float("-inf")
        self._drawn = 0  # terminal: how many layer lines are on screen

    def __call__(self, event: PullEvent) -> None:
        if not event.layer or event.status.startswith(
            "Pulling from"
        ):  # about the image (its tag), not a layer
            return
        with self._lock:
            now = self._clock.now()
            layer = self._layers.setdefault(event.layer, LayerState())
            layer.status = event.status
            if event.status == "Downloading":
                layer.started = now if layer.started is None else layer.started
                layer.downloaded, layer.size = event.current, event.total or layer.size
            elif event.status.startswith(DOWNLOADED):
                layer.size = layer.size or event.total
                layer.downloaded = layer.size
            if self._tty:
                if now - self._last_draw >= REDRAW_S:
                    self._draw(now)
            elif now - self._last_report >= self._report_s:
                self._last_report = now
                self._write(f"pulling {self._reference}: {self._summary(now)}{self._active(now)}\n")

    def close(self, image_id: str) -> None:
        """The pull ended with ``image_id``: the layer lines drawn once more as they ended, then the summary."""
        with self._lock:
            now = self._clock.now()
            if self._tty and self._layers:
                self._draw(now)
            took = format_duration(now - self._started)
            what = self._summary(now) if self._layers else "up to date, no layer downloaded"
            self._write(f"pulled {self._reference} ({image_id[:19]}): {what} in {took}\n")

    # Lines ------------------------------------------------------------------------------------------

    def _summary(self, now: float) -> str:
        done = sum(layer.status.startswith(DONE) for layer in self._layers.values())
        downloaded = sum(layer.downloaded for layer in self._layers.values())
        known = sum(layer.size for layer in self._layers.values())
        of = f" of {format_bytes(known)}" if known else ""
        return f"{done}/{len(self._layers)} layers done, {format_bytes(downloaded)}{of}, {self._rate(downloaded, self._started, now)}"

    def _active(self, now: float) -> str:
        active = [
            f"{name} {format_bytes(layer.downloaded)}/{format_bytes(layer.size)} {self._rate(layer.downloaded, layer.started, now)}"
            for name, layer in self._layers.items()
            if layer.status == "Downloading"
        ]
        return f"; downloading {', '.join(active)}" if active else ""

    def _layer_line(self, name: str, layer: LayerState, now: float) -> str:
        if layer.status == "Downloading":
            of = f"/{format_bytes(layer.size)}" if layer.size else ""
            return f"{name}: Downloading {format_bytes(layer.downloaded)}{of} {self._rate(layer.downloaded, layer.started, now)}"
        size = f" {format_bytes(layer.size)}" if layer.size else ""
        return f"{name}: {layer.status}{size}"

    @staticmethod
    def _rate(count: int, since: float | None, now: float) -> str:
        seconds = now - since if since is not None else 0.0
        return f"{format_bytes(count / seconds)}/s" if seconds > 0 else "-/s"

    def _draw(self, now: float) -> None:
        """Terminal: back up over the layer lines drawn last time and draw every layer's line again."""
        self._last_draw = now
        width = max((self._width or shutil.get_terminal_size().columns) - 1, 10)
        up = f"\x1b[{self._drawn}F" if self._drawn else ""
        lines = "".join(f"\x1b[2K{self._layer_line(n, s, now)[:width]}\n" for n, s in self._layers.items())
        self._write(up + lines)
        self._drawn = len(self._layers)

    def _write(self, text: str) -> None:
        self._stream.write(text if self._tty else ANSI_RE.sub("", text))
        self._stream.flush()


def pull_images(inputs: Inputs, engine: Engine, show: BuildProgress, clock: Clock) -> None:
    """--pull: the base and donor images from their registries, even when the engine has them.

    By digest when locked, so a pull never changes what is built, only where it comes from. Each
    layer's bytes and rate are shown as they come (PullProgress, through ``show``).
    """
    for pin in inputs.pins.images():
        show.message(f"pulling {pin.reference} ({pin.name})")
        listener = show.pull_listener(pin.reference, clock)
        image_id = engine.pull(pin.reference, progress=listener)
        listener.close(image_id)
