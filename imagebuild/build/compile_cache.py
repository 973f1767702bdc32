"""``build --compile-cache DIR|URL``: ccache's objects kept between builds and runners, the image unchanged.

A stage's pip build marked ``compile_cache = true`` (steps 4, MoRI, and 7, vLLM) always compiles with
ccache's remote storage at ``COMPILE_CACHE_URL``, a fixed loopback address the Dockerfile names whether
or not a cache is used (``remote_only``: nothing is kept in the layer; the step removes ccache's own
directory). So the Dockerfile, the build args and
the history are the same with and without a cache, and so is the image: ccache returns the very
object the compiler would write (its key hashes the compiler, the flags, the preprocessed source and,
with debug info, the working directory). Without ``--compile-cache`` nothing listens there, the
connection is refused at once and every compile is a miss (measured: no slower, docs/compile-cache.md).
With it, this module answers at that address for the build's duration, from a directory or by
forwarding to the user's ccache HTTP storage; the build must run with ``--network host`` so the RUN
steps' loopback is the host's. A remote URL's credentials stay in this process: never in a message,
the log, the record, a label or a layer. Builds that run at once on one host with the same cache
share one server (imagebuild.build.compile_cache_server.SharedServing).
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import urllib.parse
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from imagebuild.inputs.layout import COMPILE_CACHE_PORT
from imagebuild.log import logger
from imagebuild.secrets import redact

if TYPE_CHECKING:
    from imagebuild.build.stream import StepTiming
    from imagebuild.render import Dockerfile


@dataclass(frozen=True, kw_only=True)
class CompileCache:
    """Where the objects are kept: a local directory, or a ccache HTTP storage (http:// or https://)."""

    directory: Path | None = None
    url: str = ""  # with any credentials it was given: never shown

    @property
    def described(self) -> str:
        """The cache as messages and the record name it: the URL without user info, query or fragment."""
        if self.directory is not None:
            return str(self.directory)
        parts = urllib.parse.urlsplit(self.url)
        host = parts.hostname or ""
        where = f"[{host}]" if ":" in host else host
        try:
            port = f":{parts.port}" if parts.port else ""
        except ValueError:  # not a number: refused by compile_cache_problem, shown without it
            port = ""
        return redact(f"{parts.scheme}://{where}{port}{parts.path}")

    @property
    def key(self) -> str:
        """The cache exactly (the directory resolved; the URL with its credentials), as a digest that
        shows neither: builds whose keys are equal can share one server."""
        named = f"directory\0{self.directory.resolve()}" if self.directory is not None else f"url\0{self.url}"
        return hashlib.sha256(named.encode()).hexdigest()


def compile_cache_problem(text: str) -> str | None:
    """Why ``text`` is no compile cache, in words that never repeat a credential it holds; None when it is one."""
    if not text:  # Path("") is the working directory: a cache there would fill the checkout
        return "empty: name a directory for the objects (it is created when missing) or an http(s):// storage"
    if "://" in text:
        parts = urllib.parse.urlsplit(text)
        if parts.scheme not in ("http", "https"):
            return f"{parts.scheme}:// storage is not supported: give an http:// or https:// ccache storage, or a directory"
        try:
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError:
            return "the URL's port is not a number"
        if parts.query or parts.fragment:
            return "a query or fragment is not forwarded: give the storage's URL without one (credentials as user:password@)"
        return None if parts.hostname else "the URL names no host"
    path = Path(text)
    if path.exists() and not path.is_dir():
        return "not a directory: name a directory for the objects (it is created when missing)"
    existing = next((p for p in (path.resolve(), *path.resolve().parents) if p.exists()), None)
    if existing is None or not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing or path} is not writable: name a directory you can write"
    return None


@dataclass(kw_only=True)
class CacheCounts:
    """What ccache asked of the cache during one build."""

    cache: str  # the cache as ``CompileCache.described`` names it
    hits: int = 0
    misses: int = 0
    stored: int = 0
    failed: int = 0  # requests the remote refused or did not answer in time (each a miss for ccache)
    # Another build's server answered this build's compiles for the first ``shared_seconds`` (counted there).
    shared_with: int | None = None  # that build's pid
    shared_seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, name: str) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + 1)

    def to_json(self) -> dict[str, object]:
        """The build record's ``compile_cache``."""
        counts = {"hits": self.hits, "misses": self.misses, "stored": self.stored, "failed": self.failed}
        shared = {"shared_seconds": round(self.shared_seconds, 1)} if self.shared_with is not None else {}
        return {"cache": self.cache, **counts, **shared}

    def summary(self) -> str:
        """One line: ccache looks up two entries per compile (its manifest, then the object), so a
        fully cached compile is two hits."""
        asked = self.hits + self.misses
        rate = f" ({100 * self.hits / asked:.0f}%)" if asked else ""
        failed = f", {self.failed} remote failures" if self.failed else ""
        shared = (
            f"; for its first {self.shared_seconds:.1f} s the server of the build of pid {self.shared_with} answered "
            "(and counted) this build's lookups"
            if self.shared_with is not None
            else ""
        )
        return (
            f"compile cache {self.cache}: {self.hits} of {asked} lookups hit{rate}, {self.stored} entries stored{failed}{shared}"
        )

    def unasked(self, ran: Iterable[int]) -> str:
        """A warning when steps that compile through the cache ran and nothing asked it; '' otherwise.

        A ccache before 4.4 has no remote storage, so the cache would be silently of no use to it."""
        steps = tuple(ran)
        if not steps or self.hits + self.misses + self.stored + self.failed or self.shared_with is not None:
            return ""  # asked; or, while another build served, asked there
        named = ("steps " if len(steps) > 1 else "step ") + ", ".join(str(number) for number in steps)
        return (
            f"imagebuild: warning: compile cache {self.cache}: {named} ran and no compile asked the cache: nothing "
            "compiled there, or the image's ccache is older than 4.4 (no remote storage) or not on PATH"
        )


def cache_steps_run(dockerfile: Dockerfile, timings: Iterable[StepTiming]) -> tuple[int, ...]:
    """The steps whose compiles go through the cache (a ``compile_cache`` pip build) that ran, not cached."""
    through = {step.number for step in dockerfile.steps if step.compile_cache}
    return tuple(timing.number for timing in timings if not timing.cached and timing.number in through)


def something_listens(port: int = COMPILE_CACHE_PORT) -> bool:
    """Whether anything answers at the compile cache's address (a build without a cache then talks to it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def serving(
    cache: CompileCache | None, *, network: str | None, port: int = COMPILE_CACHE_PORT
) -> Iterator[CacheCounts | None]:
    """Answer ccache at COMPILE_CACHE_URL from ``cache`` while the block runs; nothing when ``cache`` is None.

    Without a cache, a host-network build whose address something else answers is warned about: its
    compiles would talk to that program (measured harmless only when nothing listens).
    """
    if cache is None:
        if network == "host" and something_listens(port):
            logger.warning(
                "imagebuild: warning: something answers at 127.0.0.1:%d, the compile cache's address: steps 4 and 7's "
                "ccache will send it requests; stop it, or build with --compile-cache DIR",
                port,
            )
        yield None
        return
    from imagebuild.build.compile_cache_server import (
        DirectoryStore,
        RemoteStore,
        SharedServing,
        cache_handler,
    )

    counts = CacheCounts(cache=cache.described)
    if cache.directory is not None:
        cache.directory.mkdir(parents=True, exist_ok=True)
    store = DirectoryStore(cache.directory) if cache.directory is not None else RemoteStore(cache.url)
    server = SharedServing(cache_handler(store, counts, cache), port, counts)
    server.start(cache)
    try:
        yield counts
    finally:
        server.stop()
