"""The in-image probe's file scan, run here on a directory tree: what it reads, skips and reports."""

from __future__ import annotations

import os
from pathlib import Path

from imagebuild import secrets
from imagebuild.verify.checks import probe

TOKEN = "ghp_" + "Zq9" * 12


def test_the_probe_runs_the_detector_from_its_source(tmp_path: Path) -> None:
    # As in the image: imagebuild is not installed there, so the probe execs secrets.py's source.
    module = probe._load_secrets(Path(secrets.__file__).read_text(encoding="utf-8"))
    assert [f.kind for f in module.find_secrets(f"x {TOKEN}")] == ["GitHub token"]


def test_the_scan_reports_path_line_and_a_redacted_match(tmp_path: Path) -> None:
    root = tmp_path / "opt"
    (root / "app" / "conf").mkdir(parents=True)
    (root / "app" / "conf" / "settings.env").write_text(f"A=1\nB=2\nGITHUB_TOKEN={TOKEN}\n")
    (root / "clean.txt").write_text("nothing to see\n")
    (root / "tool.bin").write_bytes(b"\x7fELF\x00\x00" + TOKEN.encode())  # a binary: not scanned
    (root / "big.log").write_text("x" * 2048 + TOKEN)  # over the size bound: not scanned
    (root / "link.env").symlink_to(root / "app" / "conf" / "settings.env")  # scanned where it lives
    os.mkfifo(root / "fifo")  # never opened: it would block
    scan = probe._scan_files([str(root)], 1024, secrets)
    assert scan["found"] == 1
    (finding,) = scan["findings"]
    assert finding["path"] == str(root / "app" / "conf" / "settings.env")
    assert finding["line"] == 3
    assert finding["kind"] == "GitHub token"
    assert finding["shown"].endswith(f"GITHUB_TOKEN=<redacted {len(TOKEN)} chars>")
    assert TOKEN[4:] not in str(scan)
    assert (scan["scanned"], scan["binary"], scan["too_large"]) == (2, 1, 1)


def test_a_missing_root_is_an_empty_scan(tmp_path: Path) -> None:
    scan = probe._scan_files([str(tmp_path / "absent")], 1024, secrets)
    assert (scan["found"], scan["scanned"]) == (0, 0)


def test_every_setuptools_on_the_path_in_import_order_egg_info_too(tmp_path: Path) -> None:
    local, system = tmp_path / "local", tmp_path / "system"
    (local / "setuptools-80.9.0.dist-info").mkdir(parents=True)
    (local / "setuptools-80.9.0.dist-info" / "METADATA").write_text("Name: setuptools\nVersion: 80.9.0\n")
    (system / "setuptools-66.1.1.egg-info").mkdir(parents=True)  # as Debian's python3-setuptools ships it
    (system / "setuptools-66.1.1.egg-info" / "PKG-INFO").write_text("Name: setuptools\nVersion: 66.1.1\n")
    found = probe._installed("setuptools", [str(local), str(system)])
    assert [f["version"] for f in found] == ["80.9.0", "66.1.1"]
