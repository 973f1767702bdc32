"""Compare two images semantically, as diffoci's ``--semantic`` mode does.

Three views: the image config (env, labels, entrypoint, cmd, workdir, user,
platform, the history's created_by), the layers position by position, and the
flattened file tree. A file is compared by type, mode, owner, size, content
sha256, link target, device and xattrs; mtimes (and the config's times) only
when asked, since a rebuild that differs only in them is the same image in
every way that matters at run time. Pure functions over indexed images: no
engine, no files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from imagebuild.diff.tree import FIELDS, Entry, LayerIndex, flatten
from imagebuild.engine.saved_image import SavedImage

CONFIG_FIELDS = (("Entrypoint", "entrypoint"), ("Cmd", "cmd"), ("WorkingDir", "workdir"), ("User", "user"))


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """One side of a comparison: where it came from and its indexed image."""

    name: str  # as the user gave it
    image: SavedImage[LayerIndex]


@dataclass(frozen=True, kw_only=True)
class FileChange:
    path: str
    change: str  # "added" (only in B), "removed" (only in A), "changed"
    fields: dict[str, tuple[object, object]] = field(default_factory=dict)  # name -> (A, B)
    kind: str = ""  # the entry's type (B's when added, A's otherwise)


@dataclass(frozen=True, kw_only=True)
class ConfigChange:
    key: str  # e.g. "label io.imagebuild.pin.router", "env PATH", "history[57] created_by"
    a: object
    b: object


@dataclass(frozen=True, kw_only=True)
class LayerChange:
    index: int
    a: str | None  # diffID, None when A has no layer here
    b: str | None
    files: tuple[FileChange, ...]


@dataclass(frozen=True, kw_only=True)
class ImageDiff:
    a: str
    b: str
    a_id: str
    b_id: str
    mtime: bool
    config: tuple[ConfigChange, ...]
    layers: tuple[LayerChange, ...]  # only layers that differ in what is compared
    files: tuple[FileChange, ...]  # the flattened trees
    layer_counts: tuple[int, int]

    @property
    def identical(self) -> bool:
        return not (self.config or self.layers or self.files)


def _fields(mtime: bool) -> tuple[str, ...]:
    return (*FIELDS, "mtime") if mtime else FIELDS


def compare_entries(a: dict[str, Entry], b: dict[str, Entry], *, mtime: bool) -> list[FileChange]:
    names = _fields(mtime)
    changes: list[FileChange] = []
    for path in sorted(a.keys() | b.keys()):
        old, new = a.get(path), b.get(path)
        if new is None:
            assert old is not None
            changes.append(FileChange(path=path, change="removed", kind=old.kind))
        elif old is None:
            changes.append(FileChange(path=path, change="added", kind=new.kind))
        else:
            differ = {n: (old.value(n), new.value(n)) for n in names if old.value(n) != new.value(n)}
            if differ:
                changes.append(FileChange(path=path, change="changed", fields=differ, kind=old.kind))
    return changes


def _layer_files(a: LayerIndex, b: LayerIndex, *, mtime: bool) -> list[FileChange]:
    changes = compare_entries(a.entries, b.entries, mtime=mtime)
    for label, old, new in (("whiteout", a.whiteouts, b.whiteouts), ("opaque", a.opaque, b.opaque)):
        changes += [FileChange(path=p, change="removed", kind=label) for p in sorted(old - new)]
        changes += [FileChange(path=p, change="added", kind=label) for p in sorted(new - old)]
    return sorted(changes, key=lambda c: c.path)


def compare_layers(a: tuple[LayerIndex, ...], b: tuple[LayerIndex, ...], *, mtime: bool) -> list[LayerChange]:
    changes: list[LayerChange] = []
    for index in range(max(len(a), len(b))):
        old = a[index] if index < len(a) else None
        new = b[index] if index < len(b) else None
        if old is not None and new is not None:
            if old.diff_id == new.diff_id:
                continue  # same bytes: nothing can differ
            files = _layer_files(old, new, mtime=mtime)
            if files:
                changes.append(LayerChange(index=index, a=old.diff_id, b=new.diff_id, files=tuple(files)))
        else:
            only = old or new
            assert only is not None
            side = "removed" if new is None else "added"
            files = [FileChange(path=p, change=side, kind=e.kind) for p, e in sorted(only.entries.items())]
            changes.append(
                LayerChange(
                    index=index,
                    a=old.diff_id if old else None,
                    b=new.diff_id if new else None,
                    files=tuple(files),
                )
            )
    return changes


def _mapping(config: dict[str, Any], key: str) -> dict[str, str]:
    value = (config.get("config") or {}).get(key)
    if key == "Env":
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in value or [])
    return dict(value or {})


def compare_config(a: dict[str, Any], b: dict[str, Any], *, mtime: bool) -> list[ConfigChange]:
    changes: list[ConfigChange] = []
    for key in ("architecture", "os"):
        if a.get(key) != b.get(key):
            changes.append(ConfigChange(key=key, a=a.get(key), b=b.get(key)))
    for key, label in (("Env", "env"), ("Labels", "label")):
        old, new = _mapping(a, key), _mapping(b, key)
        changes += [
            ConfigChange(key=f"{label} {name}", a=old.get(name), b=new.get(name))
            for name in sorted(old.keys() | new.keys())
            if old.get(name) != new.get(name)
        ]
    for key, label in CONFIG_FIELDS:
        old_value, new_value = (a.get("config") or {}).get(key), (b.get("config") or {}).get(key)
        if (old_value or None) != (new_value or None):  # null, [] and "" all mean "not set"
            changes.append(ConfigChange(key=label, a=old_value, b=new_value))
    history_a, history_b = a.get("history") or [], b.get("history") or []
    keys = ("created_by", "created") if mtime else ("created_by",)
    for index in range(max(len(history_a), len(history_b))):
        old_entry = history_a[index] if index < len(history_a) else {}
        new_entry = history_b[index] if index < len(history_b) else {}
        for name in keys:
            if old_entry.get(name) != new_entry.get(name):
                changes.append(
                    ConfigChange(key=f"history[{index}] {name}", a=old_entry.get(name), b=new_entry.get(name))
                )
    if mtime and a.get("created") != b.get("created"):
        changes.append(ConfigChange(key="created", a=a.get("created"), b=b.get("created")))
    return changes


def compare_images(a: Snapshot, b: Snapshot, *, mtime: bool = False) -> ImageDiff:
    return ImageDiff(
        a=a.name,
        b=b.name,
        a_id=a.image.image_id,
        b_id=b.image.image_id,
        mtime=mtime,
        config=tuple(compare_config(a.image.config, b.image.config, mtime=mtime)),
        layers=tuple(compare_layers(a.image.layers, b.image.layers, mtime=mtime)),
        files=tuple(compare_entries(flatten(a.image.layers), flatten(b.image.layers), mtime=mtime)),
        layer_counts=(len(a.image.layers), len(b.image.layers)),
    )
