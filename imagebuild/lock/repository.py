"""The lock's sources behind one small interface, so its policy can be tested without them.

:class:`Sources` is what the lock asks about a pin: its current immutable
identity, or a :class:`~imagebuild.lock.source_errors.SourceError` naming the
pin. The real one (``RemoteSources`` in sources.py) asks git, registries,
file servers and package indexes; ``FakeSources`` in imagebuild/testing/sources.py
answers from a table, as pip-tools' ``FakeRepository`` stands behind its
``BaseRepository``. The lock opens one instance per run with the run's
:class:`SourceSettings`, asks it from several threads, and closes it when it
stops waiting (done, failed, the deadline or Ctrl-C).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

from imagebuild.inputs.arch import ArchProfile
from imagebuild.pins import Pin
from imagebuild.util.retry import Deadline, RetryHook


@dataclass(frozen=True, kw_only=True)
class Resolved:
    """A source's answer: the identity fields to record, and what to tell about them."""

    fields: dict[str, str | int]
    detail: str = ""
    yanked: str | None = None  # a PyPI file's yank reason ("" when none given); None: not yanked
    # The recorded identity corrected, for when it is kept: a hand-edited commit's own time.
    recorded: dict[str, str | int] = field(default_factory=dict)
    newest: str | None = None  # a PyPI project's newest final release on the index (for --outdated)


@dataclass(frozen=True, kw_only=True)
class SourceSettings:
    """What every source of one lock run shares: the target, the limits, the registries to log in to."""

    arch: ArchProfile
    python: str | None  # the base image's python, for wheel tags (None: pins.toml has no base image)
    timeout: float  # seconds to connect, and between the bytes of an answer
    deadline: Deadline  # of the whole lock
    registries: frozenset[str]  # the image registries the lock will ask (their credentials are read first)
    on_retry: RetryHook | None = None


class Sources(ABC):
    """The sources of one lock run; ``resolve`` is called from several threads at once."""

    @abstractmethod
    def resolve(self, pin: Pin) -> Resolved:
        """The pin's identity now; SourceError naming the pin, or Cancelled once ``close`` was called."""

    @abstractmethod
    def close(self) -> None:
        """Stop whatever still runs (git processes, HTTP sessions); the lock asks nothing more."""


# Opens the sources of one lock run (the real ones read docker's credentials here, before any request).
OpenSources = Callable[[SourceSettings], Sources]
