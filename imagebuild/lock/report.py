"""What a lock found, per pin or package, as data; rendered as a table or as JSON.

Both locks (pins.toml and the python lock, pylock.toml) report in one shape: a
:class:`FileLockResult` of :class:`Change` items, each with its old and new
identity, a status, and whether the file takes it. What differs (a pin's kind
and identity fields, a package's dependency groups, the table's columns) is in
the subclasses. Pure functions of the result: no printing here, the CLI decides
where text goes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, TypeVar

from imagebuild.pins import PinSet

# "unresolved": the pin needs its source to be settled (incomplete, edited, never vouched for)
# and the lock asked none (--offline, --locked): a plain `imagebuild lock` would change it.
Status = Literal["unchanged", "filled", "normalized", "updated", "moved", "unresolved"]
PackageStatus = Literal["unchanged", "added", "removed", "updated", "regrouped", "moved"]
IdentityFields = Mapping[str, str | int]
# write: the default; dry-run and check: write nothing (check fails on a stale file); locked:
# write nothing, fail if a plain lock would write; outdated: write nothing, report what moved upstream.
Mode = Literal["write", "dry-run", "check", "locked", "outdated"]

S = TypeVar("S", bound=str)


@dataclass(frozen=True, kw_only=True)
class Change(ABC, Generic[S]):
    """One locked item's outcome. ``old``/``new`` are the display identities.

    ``applied`` says whether the new identity goes into the file (or would, on a
    dry run or check); a change that is not applied leaves the file stale.
    """

    name: str
    old: str | None
    new: str | None
    status: S
    applied: bool

    @property
    def pending(self) -> bool:
        """A difference the file does not (yet) carry."""
        return self.status != "unchanged"

    @abstractmethod
    def to_json(self) -> dict[str, Any]: ...


C = TypeVar("C", bound=Change[Any])


@dataclass(frozen=True, kw_only=True)
class FileLockResult(ABC, Generic[C]):
    """What locking one file did: its changes, whether it was written, whether it is stale."""

    UNIT: ClassVar[str]  # what a change is, counted: "pin(s)"
    PATH_KEY: ClassVar[str]  # the file's key in JSON

    path: Path
    changes: tuple[C, ...]
    wrote: bool
    stale: bool
    mode: Mode = "write"
    offline: bool = False  # no source was asked (--offline): what the files hold was checked alone

    def change(self, name: str) -> C:
        for c in self.changes:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def moved(self) -> tuple[C, ...]:
        return tuple(c for c in self.changes if c.status == "moved")

    def to_json(self) -> dict[str, Any]:
        return {
            self.PATH_KEY: str(self.path),
            "mode": self.mode,
            "wrote": self.wrote,
            "stale": self.stale,
            "offline": self.offline,
            "would_change": list(self.would_change()),
            **self._more_json(),
            "changes": [c.to_json() for c in self.changes],
        }

    def _more_json(self) -> dict[str, Any]:
        return {}

    @abstractmethod
    def format_table(self) -> str: ...

    def would_change(self) -> tuple[str, ...]:
        """One line per item a plain `imagebuild lock` would write differently (what --locked fails on)."""
        return tuple(
            f"{c.name}: {c.old or '(none)'} -> {c.new or '(none)'}"
            for c in self.changes
            if c.pending and c.applied
        )

    def summary(self) -> str:
        pending = [c for c in self.changes if c.pending]
        applied = [c for c in pending if c.applied]
        if self.wrote:
            head = f"wrote {self.path}: {len(applied)} {self.UNIT} changed"
        elif self.mode == "dry-run":
            head = f"dry run: {self.path} left untouched ({len(applied)} {self.UNIT} would change)"
        elif self.mode == "check":
            head = f"check: {self.path} is {'STALE' if self.stale else 'up to date'}"
        elif self.mode == "locked":
            changing = self.would_change()
            head = f"locked: {self.path} " + (
                f"would change ({len(changing)} {self.UNIT})" if changing else "would not change"
            )
        elif self.mode == "outdated":
            head = f"outdated: {self.path} left untouched"
        else:
            head = f"{self.path} not rewritten"
        edits = [c for c in pending if c.applied and self._edit(c)]
        if edits and not self.wrote:
            head += "; " + "; ".join(self._edit(c) or "" for c in edits) + "; run `imagebuild lock`"
        kept = [c.name for c in pending if not c.applied and c.status != "unresolved"]
        if kept:
            head += self._kept_note(kept)
        unresolved = [c.name for c in pending if c.status == "unresolved"]
        if unresolved:
            head += f"; UNRESOLVED: {', '.join(unresolved)} need their source (run `imagebuild lock`)"
        if self.offline:
            head += self._offline_note()
        return head

    def _offline_note(self) -> str:
        """The summary's note on what an offline lock could not check."""
        return ""

    def _edit(self, change: C) -> str | None:
        """What the user changed in the file since it was locked (the change is theirs, not upstream's)."""
        return None

    @abstractmethod
    def _kept_note(self, names: list[str]) -> str:
        """The summary's note on the changes kept as recorded (the file stays stale)."""


@dataclass(frozen=True, kw_only=True)
class PinChange(Change[Status]):
    """One pin's outcome; ``new_fields`` are what goes into pins.toml when applied."""

    kind: str
    tracked: str
    checked: bool  # False when the recorded identity was kept without asking the source
    old_fields: IdentityFields = field(default_factory=dict)
    new_fields: IdentityFields = field(default_factory=dict)
    # What goes into pins.toml (identity fields and fingerprint that differ from the file); the
    # kept changes write only corrections, the applied ones their new identity.
    written: IdentityFields = field(default_factory=dict)
    detail: str = ""
    yanked: str | None = None  # the index yanked the chosen file: its reason ("" if none given)
    edit: str | None = None  # pins.toml was edited since lock wrote the pin: what its fingerprint says
    # Why the source was not asked although a lock asks it (--offline, --locked); None: asked, or never asked.
    unchecked: str | None = None
    newest: str | None = None  # a PyPI pin's newest release on its index, when the lock listed it

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "tracked": self.tracked,
            "old": self.old,
            "new": self.new,
            "status": self.status,
            "applied": self.applied,
            "checked": self.checked,
            "old_fields": dict(self.old_fields),
            "new_fields": dict(self.new_fields),
            "detail": self.detail,
            "edit": self.edit,
            "yanked": self.yanked is not None,
            "yanked_reason": self.yanked or None,
            "unchecked": self.unchecked,
            "newest": self.newest,
        }


@dataclass(frozen=True, kw_only=True)
class LockResult(FileLockResult[PinChange]):
    """The pins lock's result; ``pins`` are the pins as pins.toml holds them after it."""

    UNIT: ClassVar[str] = "pin(s)"
    PATH_KEY: ClassVar[str] = "pins_path"

    pins: PinSet = field(compare=False, repr=False)
    diff: str = ""  # unified diff of pins.toml: what was (or, on a dry run, would be) written

    @property
    def pins_path(self) -> Path:
        return self.path

    def _more_json(self) -> dict[str, Any]:
        return {"diff": self.diff}

    @property
    def yanked(self) -> tuple[PinChange, ...]:
        return tuple(c for c in self.changes if c.yanked is not None)

    def format_table(self) -> str:
        rows = [("PIN", "KIND", "TRACKED", "IDENTITY", "STATUS")]
        rows += [
            (c.name, c.kind, _clip(c.tracked, 40), _identity_cell(c), _status_cell(c, self.mode))
            for c in self.changes
        ]
        lines = _columns(rows)
        for c in self.changes:
            if c.status == "moved":
                lines.append("")
                lines.append(
                    f"!! MOVED: [{c.name}] {c.tracked} was {c.old} and is now {c.new}. "
                    "A tag or file that changes under the same name is a supply-chain signal: "
                    "find out why before accepting it"
                    + ("" if c.applied else f" with `imagebuild lock -P {c.name}`")
                    + "."
                )
            if c.yanked is not None:
                reason = f" ({c.yanked})" if c.yanked else ""
                lines.append("")
                lines.append(
                    f"!! YANKED: [{c.name}] {c.new_fields.get('filename', c.tracked)} was yanked from the "
                    f"index{reason}. pip installs a yanked file only when pinned exactly, as here: "
                    "find out why it was pulled before building with it."
                )
            if c.detail and c.status != "unchanged":
                lines.append(f"   [{c.name}] {c.detail}")
        lines.append("")
        lines.append(self.summary())
        return "\n".join(lines)

    def _edit(self, change: PinChange) -> str | None:
        return change.edit

    def would_change(self) -> tuple[str, ...]:
        lines = []
        for c in self.changes:
            if c.status == "unresolved":
                lines.append(f"[{c.name}] {c.detail}: `imagebuild lock` would resolve it")
            elif c.pending and c.applied:
                why = c.edit or c.detail or f"{c.status}: {short_identity(c.old)} -> {short_identity(c.new)}"
                lines.append(f"[{c.name}] {why}: `imagebuild lock` would write it")
        return tuple(lines)

    def _offline_note(self) -> str:
        unchecked = [c.name for c in self.changes if c.unchecked is not None and c.status == "unchanged"]
        if not unchecked:
            return "; offline: every pin settled by pins.toml alone"
        return f"; offline: not checked against their source: {', '.join(unchecked)}"

    def _kept_note(self, names: list[str]) -> str:
        return (
            f"; STALE: {', '.join(names)} changed upstream and stay as recorded "
            f"(accept with `imagebuild lock -P NAME`)"
        )


@dataclass(frozen=True, kw_only=True)
class PackageChange(Change[PackageStatus]):
    """One locked python package's outcome; ``old``/``new`` are "version (sha256 prefix)"."""

    groups: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "old": self.old,
            "new": self.new,
            "status": self.status,
            "applied": self.applied,
            "groups": list(self.groups),
        }


@dataclass(frozen=True, kw_only=True)
class PythonLockResult(FileLockResult[PackageChange]):
    """The python lock's result (pylock.toml)."""

    UNIT: ClassVar[str] = "package(s)"
    PATH_KEY: ClassVar[str] = "lock_path"

    # What pylock.toml contradicts in the stages (checked offline, without the index): each a line.
    problems: tuple[str, ...] = ()
    would_write: bool = False  # the lock's text differs from the file's (its header, too)

    def _more_json(self) -> dict[str, Any]:
        return {"problems": list(self.problems)}

    def would_change(self) -> tuple[str, ...]:
        lines = [*super().would_change(), *self.problems]
        if self.would_write and not lines:
            lines.append(f"{self.path.name}'s header (index, python, platform or groups)")
        return tuple(lines)

    def _offline_note(self) -> str:
        return "; offline: not re-resolved (uv needs the index), checked against the stages only"

    @property
    def lock_path(self) -> Path:
        return self.path

    def format_table(self) -> str:
        rows = [("PACKAGE", "LOCKED", "GROUPS", "STATUS")]
        for c in self.changes:
            locked = c.new if c.old == c.new else f"{c.old or '(none)'} -> {c.new or '(none)'}"
            status: str = "MOVED !!" if c.status == "moved" else c.status
            if c.pending and not c.applied:
                status += f" (kept: needs --upgrade-pin {c.name})"
            elif c.pending and self.mode != "write":
                status += f" (not written: {self.mode})"
            rows.append((c.name, locked or "", ", ".join(c.groups), status))
        lines = _columns(rows)
        lines += [f"!! {problem}" for problem in self.problems]
        for c in self.changes:
            if c.status == "moved":
                lines.append(
                    f"!! MOVED: {c.name} {c.old} is now served with sha256 {c.new}: a wheel replaced under "
                    "the same name is a supply-chain signal; find out why before accepting it"
                    + ("" if c.applied else f" with `imagebuild lock --upgrade-pin {c.name}`")
                    + "."
                )
        lines += ["", self.summary()]
        return "\n".join(lines)

    def _kept_note(self, names: list[str]) -> str:
        return (
            f"; STALE: {', '.join(names)} kept as recorded (accept with `imagebuild lock --upgrade-pin NAME`)"
        )


def _columns(rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Rows as lines, every column but the last padded to its widest cell."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1] for r in rows
    ]


_UNCHECKED = {
    "git": "pinned by commit",
    "toolchain": "exact version",
    "wheel": "not re-hashed; -P NAME to verify",
    "pypi": "not re-hashed; -P NAME to verify",
}


def short_identity(identity: str | None) -> str:
    if not identity:
        return "(none)"
    if identity.startswith("sha256:"):
        return identity[:19]
    return identity[:12]


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _identity_cell(c: PinChange) -> str:
    if c.old == c.new:
        return short_identity(c.old)
    return f"{short_identity(c.old)} -> {short_identity(c.new)}"


def _status_cell(c: PinChange, mode: str) -> str:
    label: str = "MOVED !!" if c.status == "moved" else c.status
    if c.yanked is not None:
        label += ", YANKED !!"
    if c.status == "unresolved":
        return "UNRESOLVED (needs its source: run `imagebuild lock`)"
    if not c.checked and c.status == "unchanged":
        return f"{label} ({c.unchecked or _UNCHECKED.get(c.kind, 'not re-checked')})"
    if c.pending and not c.applied:
        return f"{label} (kept: needs -P {c.name})"
    if c.pending and mode != "write":
        return f"{label} (not written: {mode})"
    return label
