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
* The input file is the user's intent: a pin whose declared keys (url, tag, branch, image,
  version, index) changed since lock wrote it (its ``fingerprint``'s first half) is resolved
  again and applied without ``-P``; one whose identity was edited by hand (the second half) is
  asked again, its commit time fetched for the recorded commit.
* A pinned SHA that is the pinned tag's own tag object is the same pin: normalised to the
  commit, the tag object kept as ``tag_object``; a tag whose object or commit changed is MOVED.
* A git pin's commit time (``committed``, the build's SOURCE_DATE_EPOCH) is
  fetched with its commit and kept while the commit stays; commit-only git pins
  are asked only for that. Toolchain pins have nothing to resolve.
* ``--offline`` and ``--locked`` ask no source: a pin the file settles (complete, fingerprinted
  as lock wrote it) stands, noted as not checked; any other is UNRESOLVED, which a plain lock
  would change. ``--outdated`` asks every tag, branch and PyPI pin (one request each), and
  hashes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from imagebuild.lock.report import IdentityFields, PinChange, Status
from imagebuild.pins import AptPin, GitPin, LockState, Pin, PypiPin, Refresh


def identity_fields(pin: Pin) -> dict[str, str | int]:
    """The pin's recorded identity fields; empty ones as '' or 0."""
    return pin.identity_fields()


def is_complete(pin: Pin) -> bool:
    return all(identity_fields(pin).values())


def asked_for_outdated(pin: Pin) -> bool:
    """Whether --outdated asks the pin's source: a moving ref, an index's release list, or a snapshot
    service's newest snapshot (one request each, no download)."""
    return pin.refresh is Refresh.ALWAYS or isinstance(pin, PypiPin | AptPin)


def needs_resolution(pin: Pin, *, upgrade: bool) -> bool:
    """Whether the lock must ask the pin's source (network) at all."""
    if pin.refresh is Refresh.ALWAYS or pin.edited:  # an edit since the lock is resolved again
        return True
    if pin.refresh is Refresh.WHEN_EMPTY:
        return upgrade or not is_complete(pin)
    return False


def _display(fields: Mapping[str, str | int], pin: Pin) -> str | None:
    key = pin.identity_keys[0] if pin.identity_keys else None
    value = fields.get(key, "") if key else ""
    return str(value) if value else None


def _recorded(pin: Pin) -> dict[str, str | int]:
    """The identity fields and the fingerprint as pins.toml holds them."""
    return {**identity_fields(pin), "fingerprint": pin.fingerprint or ""}


def _with_fingerprint(pin: Pin, identity: Mapping[str, str | int]) -> dict[str, str | int]:
    return {**identity, "fingerprint": pin.fingerprint_for(identity)}


def _written(old: Mapping[str, str | int], final: Mapping[str, str | int]) -> dict[str, str | int]:
    return {k: v for k, v in final.items() if old.get(k, "") != v}


def kept(pin: Pin) -> PinChange:
    """A pin whose recorded identity stands without asking its source.

    A complete file pin (its sha256 is checked by the build) that lock never fingerprinted
    gets its fingerprint here, offline.
    """
    old = identity_fields(pin)
    fill = pin.lock_state is LockState.UNRECORDED and bool(pin.declared_keys) and is_complete(pin)
    written = _written(_recorded(pin), _with_fingerprint(pin, old)) if fill else {}
    return PinChange(
        name=pin.name,
        kind=str(pin.kind),
        tracked=pin.tracked,
        old=pin.identity,
        new=pin.identity,
        status="filled" if written else "unchanged",
        applied=bool(written),
        checked=False,
        old_fields=old,
        new_fields=old,
        written=written,
    )


def missing_fields(pin: Pin) -> list[str]:
    """The identity keys a complete identity needs that pins.toml leaves empty."""
    return [k for k, v in identity_fields(pin).items() if not v and k not in pin.optional_keys]


def settled(pin: Pin) -> bool:
    """Whether pins.toml alone says a plain lock leaves the pin as it is (no source needed to know).

    Complete and fingerprinted as lock wrote it: a plain lock never rewrites such a pin (a moved
    tag or branch is kept until -P). Anything else (incomplete, edited, never vouched for) it would.
    """
    return not missing_fields(pin) and (pin.lock_state is LockState.MATCHES or not pin.declared_keys)


def unasked(pin: Pin, why: str) -> PinChange:
    """A pin the lock would ask its source about, left unasked (``why``: --offline, --locked).

    A settled pin stands as recorded, its table cell saying it was not checked; any other is
    "unresolved": the file is stale, and a plain lock would change it.
    """
    if settled(pin):
        return replace(kept(pin), unchecked=f"not checked: {why}")
    if missing := missing_fields(pin):
        reason = f"its identity is incomplete ({', '.join(missing)} empty)"
    elif pin.edited:
        reason = pin.edit_problem()
    else:
        reason = "no fingerprint: lock asks its source to vouch for the recorded identity"
    return replace(kept(pin), status="unresolved", applied=False, written={}, detail=reason, unchecked=why)


def _recorded_differs(pin: Pin, new: IdentityFields) -> list[str]:
    """The identity keys whose recorded (non-empty) value the source contradicts."""
    old = identity_fields(pin)
    return [k for k, v in new.items() if old.get(k) and old.get(k) != v]


def _only_derived_differ(pin: Pin, new: IdentityFields) -> bool:
    differs = _recorded_differs(pin, new)
    return bool(differs) and all(k in pin.derived_keys for k in differs)


def classify(pin: Pin, new: IdentityFields) -> Status:
    """Compare the recorded identity with what the source says now."""
    old = identity_fields(pin)
    if all(old.get(k) == v for k, v in new.items()):
        return "unchanged"
    recorded_differs = _recorded_differs(pin, new)
    if not recorded_differs:
        return "filled"
    if _only_derived_differ(pin, new):
        return "updated"  # a recorded fact about the identity corrected: applied, never an alarm
    return pin.drift(recorded_differs, old, new)


def _is_tag_object(pin: GitPin, new: IdentityFields) -> bool:
    """The pinned SHA is the tag object of the very tag the source peeled: the same pin, normalised."""
    tag_object = new.get("tag_object")
    return bool(tag_object) and pin.commit == tag_object and pin.tag_object in (None, tag_object)


def judge(
    pin: Pin,
    new: IdentityFields,
    *,
    upgrade: bool,
    detail: str = "",
    yanked: str | None = None,
    recorded: IdentityFields | None = None,
    newest: str | None = None,
) -> PinChange:
    """The change a resolved pin makes; moved/updated apply only on upgrade, or when pins.toml asked.

    ``recorded`` are the source's corrections to the recorded identity (a kept commit's own
    time) for when the change is not applied. An edited ref (the fingerprint's first half) is the
    user's intent and is applied at once; a pinned tag object is normalised to its commit.
    """
    state = pin.lock_state
    status = classify(pin, new)
    notes = [detail] if detail else []
    if isinstance(pin, GitPin) and _is_tag_object(pin, new):
        status = "normalized"
        tag = pin.tracked if pin.tag else "an annotated tag"
        notes.append(
            f"{pin.commit} is the tag object of {tag}: recorded as the commit it points at, "
            f"{new.get('commit')}, with tag_object = {pin.commit}"
        )
    declared_changed = state is LockState.DECLARED_CHANGED
    if declared_changed:
        status = "updated" if status in ("moved", "updated", "unchanged") else status
        notes.append(f"{pin.edit_problem()}: resolved again from it")
    corrections_only = status == "updated" and _only_derived_differ(pin, new)
    applied = (
        status in ("filled", "normalized")
        or declared_changed
        or corrections_only
        or (status in ("updated", "moved") and upgrade)
    )
    if applied or status == "unchanged":  # what the source just said is what the file holds
        final = _with_fingerprint(pin, {**identity_fields(pin), **new})
    else:
        # A kept change writes only the source's corrections of what it keeps (a hand-edited
        # commit's own time), fingerprinted then; else the file stays as it is, stale.
        kept_identity = {**identity_fields(pin), **(recorded or {})}
        final = _with_fingerprint(pin, kept_identity) if recorded else kept_identity
    written = _written(_recorded(pin), final)
    if status == "unchanged" and written:
        status = "filled"  # only the fingerprint (or a time of the same commit) was missing
        applied = True
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
        written=written,
        detail="; ".join(notes),
        yanked=yanked,
        edit=pin.edit_problem() if pin.edited else None,
        newest=newest,
    )


def updates_for(changes: tuple[PinChange, ...]) -> dict[str, dict[str, str | int]]:
    """The fields to write: each change's identity fields and fingerprint that differ from the file."""
    return {c.name: dict(c.written) for c in changes if c.written}
