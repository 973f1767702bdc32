"""Normalising ahead: the build's first layers rewritten and loaded while its later steps still build.

After the build, normalisation costs about 6 s per GB of new build layers on a 2-core machine (the
rewrite streamed into the engine's load, then the engine registering each layer), all of it after
the last step. But the classic builder commits an image after every instruction, and a normalised
layer depends only on the built layer and those below it (imagebuild.normalize.reuse). So once the
uncached instructions have added ``min_bytes`` since the last time, the image just committed is
normalised in a thread of its own while the next steps build; the normalisation after the build
then takes those layers from the engine, as a rebuild takes the last build's (LayerPlan.previous),
and rewrites only what came after. The identity is the same either way: only when the work is done
differs.

One image at a time, always the newest: commits that arrive meanwhile are not queued, the next round
looks at the last of them only. A cached instruction never starts one (a fully cached build does
nothing here, not even an inspect). And only with a core to spare: a round is CPU work for this
process and the engine (about 8 s of CPU per GB here), and beside a step that keeps every core busy
it slowed that step by more than it saved (measured: docs/measured.md), so a round that is due waits
until the machine has a core idle (or is left to the normalisation after the build). Nothing here falls back to ``docker
save`` (the whole image, base included): a failure stops the work ahead with a warning, and the
normalisation after the build does the rest as it always did.

The build's thread only reads the build stream while this one uses the engine, and ``finish`` joins
it before the build asks the engine anything else. The normalised intermediate images are loaded
untagged; ``remove_prefixes`` removes the ones this run loaded once the final image holds their
layers (a build that fails removes them too).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from imagebuild.engine.interface import Engine
from imagebuild.errors import ImageBuildError
from imagebuild.log import format_duration, logger
from imagebuild.normalize.model import AheadWork, LayerNote, LayerPlan, NormalizeFailure, StoreUnavailable
from imagebuild.util.cpu import idle_cores

DEFAULT_MIN_MB = 500  # `build --normalize-ahead`: new build layers worth a round ahead of the build's end
SPARE_CORES = 0.9  # idle cores a round needs before it starts: one, give or take the system's own work
RECHECK_S = 1.0  # how often a due round looks again for an idle core


class NormalizeAhead:
    """Normalises the build's intermediate images beside it; ``committed`` is the build stream's hook."""

    def __init__(
        self,
        engine: Engine,
        plan_of: Callable[[str], LayerPlan],
        spool_dir: Path,
        *,
        min_bytes: int,
        previous: tuple[LayerNote, ...] = (),
        tell: Callable[[str], None] = lambda _: None,
        idle: Callable[[], float] | None = None,
    ) -> None:
        """``plan_of(image_id)``: the layer plan of an image of this build (its steps' epochs); ``previous``:
        the last build's notes, so a round reuses what that build normalised; ``tell``: a line per round;
        ``idle``: the cores idle now (default imagebuild.util.cpu's)."""
        self._engine, self._plan_of, self._spool_dir = engine, plan_of, spool_dir
        self._min_bytes, self._tell, self._idle = min_bytes, tell, idle or idle_cores
        self._notes = previous
        self._changed = threading.Condition()
        self._first: str | None = None  # the stage's first commit: its FROM, the base image
        self._newest: tuple[str, int] | None = None  # the newest uncached commit not looked at yet, and its step
        self._done = False
        self._loaded: list[str] = []  # the normalised intermediate images this run loaded (engine IDs)
        self.work = AheadWork()
        self._thread = threading.Thread(target=self._run, name="normalize-ahead", daemon=True)
        self._thread.start()

    def committed(self, image: str, step: int, cached: bool) -> None:
        """The build committed ``image`` (an ID, short or not) after an instruction of its final stage's ``step``."""
        with self._changed:
            if self._first is None:
                self._first = image
            elif not cached and not self._done:
                self._newest = (image, step)
                self._changed.notify()

    def finish(self) -> tuple[LayerNote, ...]:
        """Wait for the round under way (none starts after this); the notes of the layers normalised."""
        with self._changed:
            self._done = True
            self._changed.notify()
        self._thread.join()
        return self._notes

    def remove_prefixes(self, keep: str = "") -> None:
        """Remove the intermediate images this run normalised and loaded (not ``keep``, the final one,
        nor one that has a name); their layers stay where the final image has them. An untagged one that
        was there before is one of these (an earlier run's, killed before it removed it): removed too."""
        self.finish()
        loaded, self._loaded = self._loaded, []
        for engine_id in loaded:
            if engine_id == keep:
                continue
            try:
                if not self._engine.inspect_image(engine_id).tags:
                    self._engine.remove_image(engine_id)
            except ImageBuildError as e:  # left for `docker image prune`: it is not the build's result
                logger.warning("imagebuild: warning: could not remove %s, normalised ahead: %s", engine_id[:19], e)

    def _run(self) -> None:
        since = -1  # the size of the image last normalised (at first the base's); -1: not asked yet
        due: tuple[str, int, int] | None = None  # (image, step, size) of a round waiting for an idle core
        while True:
            ended, newest = self._next(RECHECK_S if due else None)
            if ended:
                return
            try:
                if newest is not None:
                    image, step = newest
                    if since < 0:
                        since = self._engine.inspect_image(self._first or image).size
                    info = self._engine.inspect_image(image)
                    if info.size > since and info.size - since >= self._min_bytes:
                        due = (info.id, step, info.size)  # a newer one holds an older one's layers
                if due is not None:
                    idle = self._idle()
                    if idle < SPARE_CORES:
                        logger.debug("normalising ahead up to step %d waits: %.2f cores idle", due[1], idle)
                        continue
                    if self._ended():  # while it looked: the normalisation after the build does it all now
                        return
                    self._normalize(due[0], due[1])
                    since, due = due[2], None
            except StoreUnavailable as e:  # only `docker save` gives the image: nothing to do ahead
                self.work = replace(self.work, stopped=str(e))
                logger.debug("not normalising ahead of the build: %s", e)
                return
            except (ImageBuildError, NormalizeFailure, OSError) as e:
                self._stop(str(e))
                return
            except Exception as e:  # work ahead is optional: the normalisation after the build is not
                self._stop(f"{type(e).__name__}: {e}")
                return

    def _next(self, timeout: float | None) -> tuple[bool, tuple[str, int] | None]:
        """(whether the build has ended, the newest commit not looked at yet: None when ``timeout``
        passed without one)."""
        with self._changed:
            if self._newest is None and not self._done:
                self._changed.wait(timeout)
            newest, self._newest = self._newest, None
            return self._done, newest

    def _ended(self) -> bool:
        with self._changed:
            return self._done

    def _normalize(self, image: str, step: int) -> None:
        from imagebuild.normalize.core import normalize_image  # as after_build: off the no-op path

        started = time.monotonic()
        plan = replace(self._plan_of(image), previous=self._notes, prefix=True)
        result = normalize_image(self._engine, image, plan, self._spool_dir, save_fallback=False)
        self._loaded.append(result.engine_id)
        self._notes = result.layers
        seconds = time.monotonic() - started
        self.work = replace(
            self.work,
            prefixes=self.work.prefixes + 1,
            layers=self.work.layers + result.layers_rewritten,
            bytes=self.work.bytes + result.bytes_rewritten,
            seconds=round(self.work.seconds + seconds, 3),
        )
        self._tell(
            f"normalised ahead, up to step {step}: {result.layers_rewritten} layers ({result.bytes_rewritten / 1e6:.0f} "
            f"MB) rewritten in {format_duration(seconds)} while the build went on"
        )

    def _stop(self, reason: str) -> None:
        self.work = replace(self.work, stopped=reason)
        logger.warning("imagebuild: warning: normalising ahead of the build stopped (%s); it is done after the build", reason)
