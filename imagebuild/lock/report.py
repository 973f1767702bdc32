"""What a lock found, per pin, as data; rendered as a table or as JSON.

Pure functions of the result: no printing here, the CLI decides where text goes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Status = Literal["unchanged", "filled", "updated", "moved"]
IdentityFields = Mapping[str, str | int]
Mode = Literal["write", "dry-run", "check"]


@dataclass(frozen=True, kw_only=True)
class PinChange:
    """One pin's outcome. ``old``/``new`` are the display identities.

    ``applied`` says whether ``new_fields`` go into pins.toml (or would, on a
    dry run or check); a change that is not applied leaves the file stale.
    """

    name: str
    kind: str
    tracked: str
    old: str | None
    new: str | None
    status: Status
    applied: bool
    checked: bool  # False when the recorded identity was kept without asking the source
    old_fields: IdentityFields = field(default_factory=dict)
    new_fields: IdentityFields = field(default_factory=dict)
    detail: str = ""
    yanked: str | None = None  # the index yanked the chosen file: its reason ("" if none given)

    @property
    def pending(self) -> bool:
        """A difference the file does not (yet) carry."""
        return self.status != "unchanged"

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
            "yanked": self.yanked is not None,
            "yanked_reason": self.yanked or None,
        }


@dataclass(frozen=True, kw_only=True)
class LockResult:
    pins_path: Path
    changes: tuple[PinChange, ...]
    wrote: bool
    stale: bool
    mode: Mode = "write"
    diff: str = ""  # unified diff of pins.toml: what was (or, on a dry run, would be) written

    def change(self, name: str) -> PinChange:
        for c in self.changes:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def moved(self) -> tuple[PinChange, ...]:
        return tuple(c for c in self.changes if c.status == "moved")

    def to_json(self) -> dict[str, Any]:
        return {
            "pins_path": str(self.pins_path),
            "mode": self.mode,
            "wrote": self.wrote,
            "stale": self.stale,
            "diff": self.diff,
            "changes": [c.to_json() for c in self.changes],
        }

    @property
    def yanked(self) -> tuple[PinChange, ...]:
        return tuple(c for c in self.changes if c.yanked is not None)

    def format_table(self) -> str:
        rows = [("PIN", "KIND", "TRACKED", "IDENTITY", "STATUS")]
        rows += [
            (c.name, c.kind, _clip(c.tracked, 40), _identity_cell(c), _status_cell(c, self.mode))
            for c in self.changes
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = [
            "  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True)) + "  " + row[4]
            for row in rows
        ]
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

    def summary(self) -> str:
        pending = [c for c in self.changes if c.pending]
        applied = [c for c in pending if c.applied]
        unapplied = [c.name for c in pending if not c.applied]
        if self.wrote:
            head = f"wrote {self.pins_path}: {len(applied)} pin(s) changed"
        elif self.mode == "dry-run":
            head = f"dry run: {self.pins_path} left untouched ({len(applied)} pin(s) would change)"
        elif self.mode == "check":
            head = f"check: {self.pins_path} is {'STALE' if self.stale else 'up to date'}"
        else:
            head = f"{self.pins_path} not rewritten"
        if unapplied:
            head += (
                f"; STALE: {', '.join(unapplied)} changed upstream and stay as recorded "
                f"(accept with `imagebuild lock -P NAME`)"
            )
        return head


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
    if not c.checked and c.status == "unchanged":
        return f"{label} ({_UNCHECKED.get(c.kind, 'not re-checked')})"
    if c.pending and not c.applied:
        return f"{label} (kept: needs -P {c.name})"
    if c.pending and mode != "write":
        return f"{label} (not written: {mode})"
    return label
