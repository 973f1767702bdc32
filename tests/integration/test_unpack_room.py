"""The room a squashfs takes unpacked, against unsquashfs run as ``enroot create`` runs it.

The session's squashfs of the sample image, unpacked onto a tmpfs of exactly the room its manifest
says: the shipped importer's ``--check-only --unpack-into`` lets it through and unsquashfs fits.
Onto one of half that room: the importer refuses in one line before it reads the archive, and
unsquashfs itself fails there, as enroot would minutes into a real image's unpack.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.export_support import run_shipped_importer
from tests.integration.tmpfs import tmpfs
from tests.prerequisites import skip_or_fail

pytestmark = [pytest.mark.docker]


def test_a_tmpfs_with_the_room_the_manifest_says_unpacks_and_one_without_is_refused_first(
    sample_export: Callable[[str], Path], tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        skip_or_fail("a tmpfs to unpack into needs root")
    unsquashfs = shutil.which("unsquashfs")
    if unsquashfs is None:
        skip_or_fail("unsquashfs (squashfs-tools, what enroot create runs) is not installed")
    manifest = sample_export("squashfs")
    data = json.loads(manifest.read_text())
    needed, archive = int(data["unpacked_bytes"]), manifest.parent / data["archive"]
    for size, fits in ((needed, True), (needed // 2, False)):
        with tmpfs(tmp_path / f"tmpfs-{size}", size) as point:
            target = point / "enroot" / "data"  # enroot makes its data directory: not there yet
            began = time.monotonic()
            checked = run_shipped_importer(manifest, "--check-only", "--unpack-into", str(target))
            check_s = time.monotonic() - began
            target.mkdir(parents=True)  # as enroot does before it runs anything
            began = time.monotonic()
            unpacked = subprocess.run(
                [unsquashfs, "-no-progress", "-user-xattrs", "-d", str(target / "pyxis_job"), str(archive)],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            unpack_s = time.monotonic() - began
            used = shutil.disk_usage(point).used
            print(f"tmpfs of {size:,} B: check exit {checked.returncode} in {check_s:.2f}s, unsquashfs exit "
                  f"{unpacked.returncode} in {unpack_s:.2f}s, {used:,} B used")  # fmt: skip
            if fits:
                assert checked.returncode == 0, checked.stderr
                assert f"room to unpack: {target} has" in checked.stderr
                assert unpacked.returncode == 0, unpacked.stderr
                assert used <= needed
            else:
                assert checked.returncode == 1, checked.stderr
                (line,) = checked.stderr.splitlines()
                assert f"to unpack {archive.name}: {point}, on tmpfs, has" in line
                assert "nothing was unpacked" in line
                assert "size and sha256" not in checked.stderr  # refused before the archive was read
                assert unpacked.returncode != 0
                assert "No space left on device" in unpacked.stderr + unpacked.stdout
