"""An image diff for people (grouped by kind of change and directory) and for programs (JSON)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict

from imagebuild.diff.compare import FileChange, ImageDiff
from imagebuild.diff.tree import walk_dirs

NAMES_PER_DIR = 8
DIRS_PER_KIND = 30
CONTEXT = 40  # characters shown around the first difference of a long value
CHANGE_ORDER = ("changed", "added", "removed")
CHANGE_WORDS = {"changed": "changed", "added": "only in B", "removed": "only in A"}


def _printable(text: str) -> str:
    """``text`` with each character a terminal would act on or hide escaped (``\\x1b``, ``\\n``, ``\\u202e``):
    names and values come from the archives, which anyone may have written."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _short(value: object, limit: int = 2 * CONTEXT) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _excerpts(a: object, b: object) -> tuple[str, str]:
    """Both values cut to the neighbourhood of their first difference, so a long created_by stays readable."""
    if not (isinstance(a, str) and isinstance(b, str)) or max(len(a), len(b)) <= 2 * CONTEXT:
        return _short(a), _short(b)
    start = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    lo = max(0, start - CONTEXT // 2)

    def cut(text: str) -> str:
        piece = text[lo : lo + 2 * CONTEXT]
        return ("…" if lo else "") + piece + ("…" if lo + 2 * CONTEXT < len(text) else "")

    return cut(a), cut(b)


def _describe(change: FileChange) -> str:
    if change.change != "changed":
        return change.kind
    return ", ".join("content" if name == "sha256" else name for name in change.fields)


def format_files(changes: Iterable[FileChange], indent: str = "  ") -> list[str]:
    """Grouped by kind of change, then by directory, names listed with what changed."""
    by_change: dict[str, list[FileChange]] = {}
    for change in changes:
        by_change.setdefault(change.change, []).append(change)
    lines: list[str] = []
    for kind in CHANGE_ORDER:
        group = {c.path: c for c in by_change.get(kind, [])}
        if not group:
            continue
        lines.append(f"{indent}{CHANGE_WORDS[kind]} ({len(group)}):")
        dirs = list(walk_dirs(group))
        for directory, names in dirs[:DIRS_PER_KIND]:
            shown = [f"{n} ({_describe(group[f'{directory}/{n}' if directory else n])})" for n in names]
            more = f", and {len(names) - NAMES_PER_DIR} more" if len(names) > NAMES_PER_DIR else ""
            lines.append(f"{indent}  /{directory}: " + ", ".join(shown[:NAMES_PER_DIR]) + more)
        if len(dirs) > DIRS_PER_KIND:
            lines.append(f"{indent}  and {len(dirs) - DIRS_PER_KIND} more directories (--json lists all)")
    return lines


def format_diff(diff: ImageDiff) -> str:
    """The report for a terminal: one line per entry, whatever the names and values hold."""
    return "\n".join(_printable(line) for line in _report_lines(diff))


def _report_lines(diff: ImageDiff) -> list[str]:
    what = "identical" if diff.identical else "different"
    scope = "including mtimes" if diff.mtime else "mtimes not compared (--mtime compares them)"
    lines = [f"A: {diff.a} ({diff.a_id})", f"B: {diff.b} ({diff.b_id})", f"{what}; {scope}"]
    if diff.identical:
        return lines
    if diff.config:
        lines.append(f"config: {len(diff.config)} difference(s)")
        for change in diff.config:
            a, b = _excerpts(change.a, change.b)
            lines.append(f"  {change.key}: {a} -> {b}")
    if diff.files:
        lines.append(f"files of the flattened image: {len(diff.files)} difference(s)")
        lines += format_files(diff.files)
    if diff.layers:
        count = max(diff.layer_counts)
        lines.append(f"layers: {len(diff.layers)} of {count} differ (layer 0 is the lowest)")
        for layer in diff.layers:
            where = (
                "only in A"
                if layer.b is None
                else "only in B"
                if layer.a is None
                else f"{len(layer.files)} file(s)"
            )
            lines.append(f"  layer {layer.index}: {where}")
            lines += format_files(layer.files, indent="    ")
    return lines


def diff_json(diff: ImageDiff) -> dict[str, object]:
    data = asdict(diff)
    data["identical"] = diff.identical
    return data
