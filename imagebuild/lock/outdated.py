"""``imagebuild lock --outdated``: what moved upstream since the lock, as rows; nothing changes.

The rows are read off the lock's own result, run in its "outdated" mode (core.py asks every
tag, branch, image tag and PyPI pin and writes nothing; the python lock re-resolves with
``--upgrade`` and writes nothing), so what --outdated calls moved is what ``lock --check``
and ``lock -P NAME`` see. The table and --json give the same rows. Outdated pins do not make
the command fail (as ``pip list --outdated`` and ``uv pip list --outdated``): a source that
cannot be asked does (exit 5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from imagebuild.lock.report import LockResult, PinChange, PythonLockResult, short_identity

Verdict = Literal["current", "outdated", "moved", "not checked"]


@dataclass(frozen=True, kw_only=True)
class OutdatedRow:
    """One pin or locked package: what the file records, what upstream says now."""

    name: str
    kind: str  # a pin's kind, or "python" for a package of pylock.toml
    tracked: str
    recorded: str
    upstream: str
    verdict: Verdict
    note: str = ""  # why it was not checked, or what moved

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "tracked": self.tracked,
            "recorded": self.recorded,
            "upstream": self.upstream,
            "status": self.verdict,
            "note": self.note,
        }


_NOT_CHECKED = {
    "wheel": "a URL names no newer version; `imagebuild lock -P NAME --dry-run` re-hashes it",
    "git": "pinned by commit: nothing upstream to move",
    "toolchain": "an exact version: nothing upstream to move",
}


def pin_row(c: PinChange) -> OutdatedRow:
    recorded = short_identity(c.old)
    if not c.checked:
        note = _NOT_CHECKED.get(c.kind, "not asked")
        return OutdatedRow(
            name=c.name,
            kind=c.kind,
            tracked=c.tracked,
            recorded=recorded,
            upstream="",
            verdict="not checked",
            note=note,
        )
    version = c.tracked.partition("==")[2]  # a PyPI pin tracks project==version
    if c.status == "moved":
        verdict: Verdict = "moved"
        note = f"{c.tracked} now names other bits: a supply-chain signal, look before `imagebuild lock -P {c.name}`"
    elif c.status == "updated" or (c.newest is not None and c.newest != version):
        verdict = "outdated"
        note = f"newest release {c.newest}" if c.kind == "pypi" and c.newest != version else "moved on"
    else:
        verdict, note = "current", ""
    upstream = c.newest if c.kind == "pypi" and c.newest else short_identity(c.new)
    return OutdatedRow(
        name=c.name,
        kind=c.kind,
        tracked=c.tracked,
        recorded=recorded,
        upstream=upstream,
        verdict=verdict,
        note=note,
    )


def package_rows(result: PythonLockResult) -> list[OutdatedRow]:
    rows = []
    for c in result.changes:
        verdict: Verdict = (
            "moved" if c.status == "moved" else "current" if c.status == "unchanged" else "outdated"
        )
        note = "" if verdict == "current" else c.status
        rows.append(
            OutdatedRow(
                name=c.name,
                kind="python",
                tracked=", ".join(c.groups),
                recorded=c.old or "(none)",
                upstream=c.new or "(none)",
                verdict=verdict,
                note=note,
            )
        )
    return rows


def outdated_rows(pins: LockResult | None, python: PythonLockResult | None) -> list[OutdatedRow]:
    rows = [pin_row(c) for c in pins.changes] if pins is not None else []
    return rows + (package_rows(python) if python is not None else [])


def format_outdated(rows: list[OutdatedRow]) -> str:
    """The rows as a table, then one line saying whether anything is outdated."""
    table = [("NAME", "KIND", "TRACKED", "RECORDED", "UPSTREAM", "STATUS")]
    for r in rows:
        status = r.verdict.upper() + " !!" if r.verdict == "moved" else r.verdict
        table.append(
            (r.name, r.kind, r.tracked, r.recorded, r.upstream, f"{status} ({r.note})" if r.note else status)
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in table
    ]
    behind = [r.name for r in rows if r.verdict in ("outdated", "moved")]
    unchecked = [r.name for r in rows if r.verdict == "not checked"]
    summary = (
        f"outdated: {len(behind)} of {len(rows)}: {', '.join(behind)}"
        if behind
        else f"outdated: none of {len(rows)}"
    )
    if unchecked:
        summary += f"; not checked: {', '.join(unchecked)}"
    lines += ["", summary + "; nothing was written"]
    return "\n".join(lines) + "\n"


__all__ = ["OutdatedRow", "format_outdated", "outdated_rows"]
