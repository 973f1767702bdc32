"""FakeSources: lock's Sources answering from a table, so lock's policy is tested without servers."""

from __future__ import annotations

from collections.abc import Mapping

from imagebuild.lock.repository import Resolved, Sources, SourceSettings
from imagebuild.lock.source_errors import SourceError, SourceFailure
from imagebuild.pins import Pin

# Lock sources --------------------------------------------------------------------------------------


class FakeSources(Sources):
    """The lock's sources, answering from a table: pin name -> identity, or a failure to raise.

    Give ``open`` to the lock (``lock(options, open_sources=fake.open)``); afterwards ``asked`` holds
    the pins it asked about, ``settings`` what it opened the sources with, ``closed`` whether it
    closed them. A pin without an answer fails as a source would, naming it.
    """

    def __init__(self, answers: Mapping[str, Resolved | SourceFailure]) -> None:
        self.answers = dict(answers)
        self.asked: list[str] = []
        self.settings: SourceSettings | None = None
        self.closed = False

    def open(self, settings: SourceSettings) -> FakeSources:
        self.settings = settings
        self.closed = False
        return self

    def resolve(self, pin: Pin) -> Resolved:
        self.asked.append(pin.name)
        answer = self.answers.get(pin.name)
        if answer is None:
            raise SourceError(pin, pin.source_url, "FakeSources has no answer for it", "Give the fake one")
        if isinstance(answer, SourceFailure):
            raise SourceError.blaming(pin, answer) from answer
        return answer

    def close(self) -> None:
        self.closed = True
