"""``imagebuild lock``: resolve every pin of pins.toml to an immutable identity.

Public API (the CLI's): :class:`LockOptions`, :func:`lock`, :class:`LockResult`
and :class:`PinChange`. The policy for moved tags and re-hashing is described
in :mod:`imagebuild.lock.plan`; the flow (plan, resolve concurrently, write
once, atomically) in :mod:`imagebuild.lock.core`.
"""

from __future__ import annotations

from imagebuild.lock.core import LockOptions, lock
from imagebuild.lock.report import LockResult, PinChange

__all__ = ["LockOptions", "LockResult", "PinChange", "lock"]
