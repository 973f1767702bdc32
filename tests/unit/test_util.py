"""imagebuild.util: the one subprocess helper and the atomic write."""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path

import pytest

from imagebuild.errors import CommandError
from imagebuild.util.files import write_atomically
from imagebuild.util.run import Failure, ProcessGroup, run_command


def test_run_returns_output_and_echoes_the_command_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="imagebuild"):
        done = run_command([sys.executable, "-c", "print('hi')"], timeout=30)
    assert done.stdout == "hi\n"
    assert done.returncode == 0
    assert any(r.getMessage().startswith("$ ") and "print" in r.getMessage() for r in caplog.records)


def test_missing_tool_is_named() -> None:
    with pytest.raises(CommandError, match="`no-such-tool-imagebuild` is not installed") as e:
        run_command(["no-such-tool-imagebuild", "--version"], timeout=5)
    assert e.value.failure == Failure.MISSING


def test_failure_names_the_command_and_shows_stderr() -> None:
    script = "import sys; sys.stderr.write('boom\\n'); sys.exit(3)"
    with pytest.raises(CommandError, match=r"failed with exit status 3:\nboom") as e:
        run_command([sys.executable, "-c", script], timeout=30)
    assert e.value.returncode == 3
    assert "-c" in e.value.command


def test_unchecked_failure_is_returned() -> None:
    done = run_command([sys.executable, "-c", "import sys; sys.exit(1)"], timeout=30, check=False)
    assert done.returncode == 1


def test_timeout_is_an_error_naming_the_command() -> None:
    with pytest.raises(CommandError, match=r"did not finish within 0.2 s") as e:
        run_command([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.2)
    assert e.value.failure == Failure.TIMEOUT


def test_atomic_write_replaces_and_keeps_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "pins.toml"
    path.write_text("old\n")
    path.chmod(0o640)
    write_atomically(path, "new\n")
    assert path.read_text() == "new\n"
    assert path.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["pins.toml"]


def test_atomic_write_leaves_the_old_file_when_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "pins.toml"
    path.write_text("old\n")

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomically(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["pins.toml"]


def test_atomic_write_syncs_the_directory_after_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "record.json"
    synced: list[bool] = []  # True: a directory was synced
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(Path(f"/proc/self/fd/{fd}").resolve() == tmp_path)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    write_atomically(path, "{}\n")
    assert synced == [False, True]


def test_kill_all_cancels_a_running_command_and_refuses_new_ones() -> None:
    group = ProcessGroup()
    killer = threading.Timer(0.2, group.kill_all)
    killer.start()
    with pytest.raises(CommandError, match="was killed: the work was cancelled") as e:
        run_command([sys.executable, "-c", "import time; time.sleep(30)"], timeout=30, processes=group)
    assert e.value.failure == Failure.CANCELLED
    with pytest.raises(CommandError, match="not started") as e:
        run_command([sys.executable, "-c", "pass"], timeout=30, processes=group)
    assert e.value.failure == Failure.CANCELLED
