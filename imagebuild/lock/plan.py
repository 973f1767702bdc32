"""Which pins to ask their source about, and what an answer means.

Pure functions, no I/O: unit-tested without servers.

Policy (conservative, as pip-tools' ``compile`` is):

* An empty identity is filled, always.
* git tags/branches and image tags are always resolved (one cheap request):
  a tag that now names another commit or digest is MOVED, a branch that
  moved on is UPDATED. Neither is rewritten without ``-U/--upgrade`` or
  ``-P/--upgrade-package NAME``: the recorded identity is what was reviewed
  and built, and a force-pushed tag is a supply-chain signal a human must
  look at. Until accepted the result is stale (``--check`` fails).
* Wheel URLs and PyPI files are re-hashed only when their identity is empty
  or an upgrade asks for it (re-downloading a 1 GB wheel on every lock would
  be silly). On upgrade, other bytes under a recorded URL or filename are
  MOVED; another filename of the same release is UPDATED.
* A git pin's commit time (``committed``, the build's SOURCE_DATE_EPOCH) is
  fetched with its commit and kept while the commit stays; commit-only git pins
  are asked only for that. Toolchain pins have nothing to resolve.
"""

from __future__ import annotations

from collections.abc import Mapping

from imagebuild.lock.report import IdentityFields, PinChange, Status
from imagebuild.pins import Pin, Refresh


def identity_fields(pin: Pin) -> dict[str, str | int]:
    """The pin's recorded identity fields; empty ones as '' or 0."""
    return pin.identity_fields()


def is_complete(pin: Pin) -> bool:
    return all(identity_fields(pin).values())


def needs_resolution(pin: Pin, *, upgrade: bool) -> bool:
    """Whether the lock must ask the pin's source (network) at all."""
    if pin.refresh is Refresh.ALWAYS:
        return True
    if pin.refresh is Refresh.WHEN_EMPTY:
        return upgrade or not is_complete(pin)
    return False


def _display(fields: Mapping[str, str | int], pin: Pin) -> str | None:
    key = pin.identity_keys[0] if pin.identity_keys else None
    value = fields.get(key, "") if key else ""
    return str(value) if value else None


def kept(pin: Pin) -> PinChange:
    """A pin whose recorded identity stands without asking its source."""
    old = identity_fields(pin)
    return PinChange(
        name=pin.name,
        kind=str(pin.kind),
        tracked=pin.tracked,
        old=pin.identity,
        new=pin.identity,
        status="unchanged",
        applied=False,
        checked=False,
        old_fields=old,
        new_fields=old,
    )


def classify(pin: Pin, new: IdentityFields) -> Status:
    """Compare the recorded identity with what the source says now."""
    old = identity_fields(pin)
    if all(old.get(k) == v for k, v in new.items()):
        return "unchanged"
    recorded_differs = [k for k, v in new.items() if old.get(k) and old.get(k) != v]
    if not recorded_differs:
        return "filled"
    return pin.drift(recorded_differs, old, new)


def judge(
    pin: Pin, new: IdentityFields, *, upgrade: bool, detail: str = "", yanked: str | None = None
) -> PinChange:
    """The change a resolved pin makes; moved/updated apply only on upgrade."""
    status = classify(pin, new)
    applied = status == "filled" or (status in ("updated", "moved") and upgrade)
    return PinChange(
        name=pin.name,
        kind=str(pin.kind),
        tracked=pin.tracked,
        old=pin.identity,
        new=_display(new, pin),
        status=status,
        applied=applied,
        checked=True,
        old_fields=identity_fields(pin),
        new_fields=dict(new),
        detail=detail,
        yanked=yanked,
    )


def updates_for(changes: tuple[PinChange, ...]) -> dict[str, dict[str, str | int]]:
    """The identity fields to write: only applied changes, only fields that differ."""
    updates: dict[str, dict[str, str | int]] = {}
    for c in changes:
        if not (c.applied and c.pending):
            continue
        fields = {k: v for k, v in c.new_fields.items() if c.old_fields.get(k) != v}
        if fields:
            updates[c.name] = fields
    return updates
