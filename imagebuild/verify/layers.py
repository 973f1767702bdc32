"""Credentials in every layer's files, the ones later layers delete or hide included.

A file a later layer deletes (a whiteout) or overwrites is gone from the container the other checks
run in, but its bytes stay in the earlier layer, so in every copy of the image: `docker save`,
a registry, an export archive. This check reads the layers themselves, from the engine's store
when this process can read it (a local overlay2 engine: each layer's diff directory; the containerd
image store: each layer's blob, decompressed and checked against its diffID) and from `docker
save` otherwise, and reports each finding with the layer (its number, lowest first, and
diffID) and the path. It scans the same roots, with the same limits and the one detector
(imagebuild.secrets), as the in-container file scan.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from imagebuild.engine.content_blobs import BlobError, layer_tar
from imagebuild.engine.interface import BlobLayer, Engine, ImageInfo, StoredImage, StoredLayer
from imagebuild.engine.saved_image import ArchiveError, read_saved_image
from imagebuild.errors import EngineError
from imagebuild.inputs.values import escape_controls
from imagebuild.log import logger
from imagebuild.secrets import find_secrets
from imagebuild.util.streams import EntryReads, HashingReader, forget_members, open_stream
from imagebuild.verify.checks.probe import BINARY_SNIFF_BYTES, SCAN_BUDGET_BYTES
from imagebuild.verify.result import CheckResult

LAYER_CHECK_NAME, LAYER_CHECK_GROUP = "test_no_secrets_in_layers", "secrets"  # runs outside pytest
SHOWN_FINDINGS = 10  # in the check's message; the count says how many more
WHITEOUT = ".wh."  # a layer tar's entry that deletes a lower layer's file: no content of its own


@dataclass(frozen=True, kw_only=True)
class LayerFinding:
    layer: int  # 1 = the lowest layer
    diff_id: str
    path: str  # absolute, as in the image
    line: int
    kind: str
    shown: str  # redacted

    def describe(self) -> str:
        where = escape_controls(self.path)  # a file name may hold a newline: the report stays one line each
        return f"layer {self.layer} ({self.diff_id[:19]}): {where}:{self.line}: {self.kind}: {self.shown}"


@dataclass
class _Budget:
    """What the scan may still read, and what it counted (shared by every layer of one image)."""

    left: int = SCAN_BUDGET_BYTES
    scanned: int = 0
    over_budget: int = 0


@dataclass(frozen=True, kw_only=True)
class _LayerFindings:
    diff_id: str
    findings: tuple[tuple[str, int, str, str], ...] = field(default=())  # path, line, kind, shown


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _scan_text(path: str, data: bytes, found: list[tuple[str, int, str, str]], budget: _Budget) -> None:
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        return  # a binary, not scanned (as git and grep decide)
    budget.scanned += 1
    text = data.decode("utf-8", errors="replace")
    for finding in find_secrets(text):
        found.append((path, text.count("\n", 0, finding.start) + 1, finding.kind, finding.shown))


def _take(size: int, max_bytes: int, budget: _Budget) -> bool:
    """Whether a file of ``size`` bytes is read: within the per-file limit and the scan's budget."""
    if size > max_bytes:
        return False
    if size > budget.left:
        budget.over_budget += 1
        return False
    budget.left -= size
    return True


def scan_layer_tar(
    stream: BinaryIO, *, roots: tuple[str, ...], max_bytes: int, budget: _Budget
) -> _LayerFindings:
    """The findings in one layer tar's regular files under ``roots``; reads the tar to its end."""
    hashing = HashingReader(stream)
    found: list[tuple[str, int, str, str]] = []
    reads = EntryReads(hashing)
    with reads.tar() as tar:
        for entry in tar:
            path = posixpath.normpath("/" + entry.name)
            whiteout = posixpath.basename(path).startswith(WHITEOUT)
            if entry.isreg() and not whiteout and _under(path, roots) and _take(entry.size, max_bytes, budget):
                data = reads.extractfile(entry)
                assert data is not None
                _scan_text(path, data.read(), found, budget)
            forget_members(tar)
    hashing.drain()  # the end-of-archive blocks count in the diffID
    return _LayerFindings(diff_id=hashing.digest, findings=tuple(found))


def scan_layer_dir(
    files: Path, diff_id: str, *, roots: tuple[str, ...], max_bytes: int, budget: _Budget
) -> _LayerFindings:
    """The findings in one stored layer's directory (whiteouts are devices there, and skipped)."""
    found: list[tuple[str, int, str, str]] = []
    for root in roots:
        top = files / root.lstrip("/")
        for where, dirs, names in os.walk(top):  # symlinked directories are not followed
            dirs.sort()
            for name in sorted(names):
                path = Path(where) / name
                try:
                    info = path.lstat()
                    if stat.S_ISREG(info.st_mode) and _take(info.st_size, max_bytes, budget):
                        _scan_text("/" + str(path.relative_to(files)), path.read_bytes(), found, budget)
                except OSError:
                    continue  # removed or unreadable while we looked: nothing to report on
    return _LayerFindings(diff_id=diff_id, findings=tuple(found))


def _stored_findings(
    stored: StoredImage, info: ImageInfo, *, roots: tuple[str, ...], max_bytes: int, budget: _Budget
) -> list[_LayerFindings] | None:
    """Every layer's findings read from the engine's store (overlay2: each layer's directory; the
    containerd store: each layer's blob, checked against its diffID), or None where it cannot give them."""
    if stored.unavailable:
        return None
    try:
        return [
            scan_layer_dir(layer.files, layer.diff_id, roots=roots, max_bytes=max_bytes, budget=budget)
            if isinstance(layer, StoredLayer)
            else _blob_findings(layer, scan_layer_tar(open_stream(layer_tar(layer)), roots=roots, max_bytes=max_bytes, budget=budget))
            for layer in stored.layers
        ]
    except (BlobError, tarfile.TarError) as e:
        logger.warning("reading %s from the engine's content store failed (%s); using docker save", info.described, e)
        return None


def _blob_findings(layer: BlobLayer, findings: _LayerFindings) -> _LayerFindings:
    """``findings`` of the layer's blob, when its tar was the layer's (BlobError otherwise)."""
    if findings.diff_id != layer.diff_id:
        msg = f"the blob {layer.blob} decompresses to {findings.diff_id[:19]}, not layer {layer.diff_id[:19]}"
        raise BlobError(msg)
    return findings


def scan_layers(
    engine: Engine, info: ImageInfo, *, roots: tuple[str, ...], max_bytes: int,
    saved_config: Callable[[str], None] = lambda _: None,
) -> tuple[tuple[LayerFinding, ...], _Budget, str]:  # fmt: skip
    """Every finding in every layer of ``info`` under ``roots``, the scan's counts, and its source;
    read from ``docker save``, the digest of the config it saved goes to ``saved_config``."""
    budget = _Budget()
    stored = engine.stored_image(info.id)
    layers = _stored_findings(stored, info, roots=roots, max_bytes=max_bytes, budget=budget)
    source = "the engine's content store" if stored.manifest is not None else "the engine's layer store"
    if layers is None:
        budget = _Budget()  # what a failed read of the store counted is not the image's

        def on_layer(_name: str, data: BinaryIO) -> _LayerFindings:
            return scan_layer_tar(data, roots=roots, max_bytes=max_bytes, budget=budget)

        try:
            saved = read_saved_image(open_stream(engine.save(info.id)), on_layer, what=f"image {info.id[:19]}")
        except (ArchiveError, tarfile.TarError, OSError) as e:
            msg = f"the engine's save of {info.id[:19]} could not be read to scan its layers: {e}"
            raise EngineError(msg) from e
        layers = list(saved.layers)
        source = "docker save"
        saved_config(saved.image_id)
    findings = tuple(
        LayerFinding(layer=number, diff_id=layer.diff_id, path=path, line=line, kind=kind, shown=shown)
        for number, layer in enumerate(layers, 1)
        for path, line, kind, shown in sorted(layer.findings)  # by path: a tar and a directory agree
    )
    return findings, budget, source


def layer_secrets_check(
    engine: Engine, info: ImageInfo, *, roots: tuple[str, ...], max_bytes: int,
    clock: Callable[[], float] = time.monotonic, saved_config: Callable[[str], None] = lambda _: None,
) -> CheckResult:  # fmt: skip
    """The layer scan as one verify check: failed with every finding named by layer and path
    (``saved_config`` as scan_layers)."""
    started = clock()
    findings, budget, source = scan_layers(engine, info, roots=roots, max_bytes=max_bytes, saved_config=saved_config)
    name, group = LAYER_CHECK_NAME, LAYER_CHECK_GROUP
    if findings:
        shown = "\n".join(f.describe() for f in findings[:SHOWN_FINDINGS])
        more = f"\n... and {len(findings) - SHOWN_FINDINGS} more" if len(findings) > SHOWN_FINDINGS else ""
        message = (  # the shape of every check's failure: what, expected, found
            f"credential-like strings in the image's layers under {', '.join(roots)} (read from {source}); a file "
            "a later layer deletes is still in every copy of the image: keep it out of the layer that adds it\n"
            f"expected: none in any layer ({budget.scanned} text files scanned)\n"
            f"found:    {len(findings)}:\n{shown}{more}"
        )
        return CheckResult(name=name, group=group, outcome="failed", message=message, duration_s=clock() - started)
    if budget.over_budget:
        message = (f"the layer scan stopped reading after its byte budget: {budget.over_budget} files under "
                   f"{', '.join(roots)} were not scanned; narrow the roots with --scan-root")  # fmt: skip
        return CheckResult(name=name, group=group, outcome="skipped", message=message, duration_s=clock() - started)
    return CheckResult(name=name, group=group, outcome="passed", duration_s=clock() - started)

