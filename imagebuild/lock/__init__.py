"""``imagebuild lock``: resolve every pin of pins.toml to an immutable identity; the python lock.

Public API (the CLI's): :func:`lock_project` with a :class:`LockRequest`, giving a
:class:`ProjectLockResult` (both locks); the pins lock alone: :class:`LockOptions`,
:func:`lock`, :class:`LockResult` and :class:`PinChange`.

Modules, in the order a lock runs:

    run            a checkout's lock: the pins lock, then the python lock, one result
    checks         options, upgrade names and the target python, checked before any request
    core           the pins lock: plan, resolve concurrently, write once, atomically
    plan           which pins to ask, and what an answer means (the policy; pure)
    turns          concurrent locks of one pins file take turns (flock)
    repository     the Sources interface the pins lock asks (a fake in imagebuild.testing)
    sources        the real sources: dispatch per kind of pin, answers checked
    source_errors  the one shape of a source's failure (FetchError, GitError, SourceError)
    git            tags and branches to commits with git ls-remote
    committime     a commit's time (SOURCE_DATE_EPOCH)
    http           the one HTTP helper: timeouts, retries, errors naming the URL
    registry       image tags to digests (OCI distribution API)
    registry_auth  registry tokens and docker's credentials, sent only where they belong
    files          a URL's sha256 and size, in constant memory
    pypi           a package index's files, and the wheel for the target
    apt_snapshot   an apt pin's newest snapshot, as its snapshot service answers
    python         the python lock: stage declarations to pylock.toml
    uv             uv behind the python lock's Resolver interface
    report         what both locks found, in one shape: tables and JSON
    outdated       --outdated's rows, read off a lock that wrote nothing
"""

from __future__ import annotations

from imagebuild.lock.core import LockOptions, lock
from imagebuild.lock.report import LockResult, PinChange
from imagebuild.lock.run import LockRequest, ProjectLockResult, lock_project

__all__ = [
    "LockOptions",
    "LockRequest",
    "LockResult",
    "PinChange",
    "ProjectLockResult",
    "lock",
    "lock_project",
]
