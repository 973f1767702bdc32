"""The one shape of a source's failure: where it was asked, what went wrong, what to check.

Every source of the lock (HTTP, git, the pin dispatch of sources.py) fails with
a :class:`SourceFailure`: a URL, a cause and a hint, rendered as one line
``URL: cause. Hint``, and whether trying again may help. The subclasses say
which helper failed and carry what only it knows (an HTTP status, a
Retry-After; the pin a :class:`SourceError` is blamed on). sources.py turns
every failure below it into a SourceError, so the lock reports each pin once.
"""

from __future__ import annotations

from imagebuild.pins import Pin


class SourceFailure(Exception):
    """A source could not answer: the URL, the cause, and what to check."""

    def __init__(self, url: str, cause: str, hint: str, *, transient: bool = False) -> None:
        super().__init__(f"{self.blame()}{url}: {cause}. {hint}")
        self.url = url
        self.cause = cause
        self.hint = hint
        self.transient = transient  # retrying may help (a reset, a 503), as the retry loop asks

    def blame(self) -> str:
        """What the one-line message starts with, before the URL."""
        return ""


class FetchError(SourceFailure):
    """A URL could not be fetched (lock/http.py): also the HTTP status and the Retry-After, if any."""

    def __init__(
        self,
        url: str,
        cause: str,
        hint: str,
        *,
        status: int | None = None,
        transient: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(url, cause, hint, transient=transient)
        self.status = status
        self.retry_after = retry_after


class GitError(SourceFailure):
    """A git command failed (lock/git.py)."""


class SourceError(SourceFailure):
    """One pin could not be resolved: the failure, blamed on the pin (its message starts ``[name]``)."""

    def __init__(self, pin: Pin, url: str, cause: str, hint: str) -> None:
        self.pin = pin  # before the message, which names it
        super().__init__(url, cause, hint)

    def blame(self) -> str:
        return f"[{self.pin.name}] "

    @classmethod
    def blaming(cls, pin: Pin, failure: SourceFailure) -> SourceError:
        """The failure of a helper (HTTP, git) as the pin's."""
        return cls(pin, failure.url, failure.cause, failure.hint)
