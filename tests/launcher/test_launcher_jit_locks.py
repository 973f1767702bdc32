"""Stale JIT lock cleanup: old lock files of AITER and MoRI whose owner is gone go (each logged);
fresh ones, live owners' and every file the two libraries did not create stay."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagebuild.launcher import serve
from imagebuild.launcher.jit_locks import AITER, MORI, LockDir, remove_stale_locks
from tests.launcher.launcher_support import k3_env

MINUTE = 60.0


def _dead_pid() -> int:
    """The PID of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


DEAD_PID = _dead_pid()


def touch(path: Path, *, minutes_old: float, content: str = f"{DEAD_PID}\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    stamp = time.time() - minutes_old * MINUTE
    os.utime(path, (stamp, stamp))
    return path


@pytest.fixture
def caches(tmp_path: Path) -> dict[str, Path]:
    """An AITER JIT dir and a MoRI JIT dir as a killed job leaves them, plus what must survive."""
    aiter, mori = tmp_path / "aiter_jit", tmp_path / "mori_jit"
    return {
        # stale: AITER's per-module and 3rd-party locks, torch's baton, MoRI's kernel lock
        "aiter_module": touch(aiter / "build" / "lock_module_moe_asm", minutes_old=67),
        "aiter_clone": touch(aiter / "build" / "lock_3rdparty_clone_ck", minutes_old=600),
        "torch_baton": touch(aiter / "build" / "module_gemm" / "build" / "lock", minutes_old=61),
        "mori_kernel": touch(
            mori / "gfx942_mlx5" / "0123abcd" / ".ep_internode_v1.hsaco.lock", minutes_old=90
        ),
        # fresh locks: a build may be running right now
        "aiter_fresh": touch(aiter / "build" / "lock_module_rmsnorm", minutes_old=59),
        "mori_fresh": touch(mori / "gfx942_mlx5" / "0123abcd" / ".ep_intranode.hsaco.lock", minutes_old=1),
        # old, but not locks: the cache itself
        "kernel": touch(aiter / "build" / "module_moe_asm.so", minutes_old=600),
        "hsaco": touch(mori / "gfx942_mlx5" / "0123abcd" / "ep_internode_v1.hsaco", minutes_old=600),
    }


def test_old_locks_are_removed_and_logged_fresh_ones_and_the_cache_stay(
    caches: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dirs = (LockDir(owner=AITER, path=tmp_path / "aiter_jit"), LockDir(owner=MORI, path=tmp_path / "mori_jit"))
    removed = remove_stale_locks(dirs, stale_min=60)
    stale = {"aiter_module", "aiter_clone", "torch_baton", "mori_kernel"}
    assert set(removed) == {caches[name] for name in stale}
    for name, path in caches.items():
        assert path.exists() == (name not in stale), name
    log = capsys.readouterr().err
    assert (
        f"removed a stale AITER JIT lock {caches['aiter_module']} (67 min old, JIT_LOCK_STALE_MIN=60)" in log
    )
    assert f"removed a stale MoRI JIT lock {caches['mori_kernel']} (90 min old, JIT_LOCK_STALE_MIN=60)" in log
    assert log.count("removed a stale") == 4


def test_the_threshold_is_jit_lock_stale_min(caches: dict[str, Path], tmp_path: Path) -> None:
    removed = remove_stale_locks((LockDir(owner=AITER, path=tmp_path / "aiter_jit"),), stale_min=120)
    assert removed == [caches["aiter_clone"]]


def test_symlinks_are_neither_followed_nor_removed(tmp_path: Path) -> None:
    outside = touch(tmp_path / "elsewhere" / "lock_precious", minutes_old=600)
    cache = tmp_path / "aiter_jit"
    (cache / "build").mkdir(parents=True)
    (cache / "build" / "lock_link").symlink_to(outside)
    (cache / "build" / "linked_dir").symlink_to(outside.parent, target_is_directory=True)
    assert remove_stale_locks((LockDir(owner=AITER, path=cache),), stale_min=60) == []
    assert outside.exists()
    assert (cache / "build" / "lock_link").is_symlink()


def test_a_missing_cache_is_nothing_to_clean(tmp_path: Path) -> None:
    assert remove_stale_locks((LockDir(owner=MORI, path=tmp_path / "absent"),), stale_min=60) == []


def test_a_cache_variable_pointed_at_other_things_removes_only_the_libraries_locks(tmp_path: Path) -> None:
    """AITER_JIT_DIR and MoRI's cache pointed at a directory that holds a checkout and a root
    filesystem: old lock files of other tools stay, wherever they are."""
    others = [
        touch(tmp_path / "poetry.lock", minutes_old=120, content=""),
        touch(tmp_path / "Cargo.lock", minutes_old=120, content=""),
        touch(tmp_path / "var" / "lib" / "dpkg" / "lock", minutes_old=120, content=""),
        touch(tmp_path / "build" / "module" / "x.lock", minutes_old=120, content=""),
        touch(tmp_path / "src" / "lock_held", minutes_old=120, content=""),  # AITER's name, not AITER's place
        touch(tmp_path / "a" / "b" / "c" / "d" / ".deep.hsaco.lock", minutes_old=120),  # deeper than MoRI goes
    ]
    ours = touch(tmp_path / "build" / "lock_module_moe_asm", minutes_old=120, content="")
    dirs = (LockDir(owner=AITER, path=tmp_path), LockDir(owner=MORI, path=tmp_path))
    assert remove_stale_locks(dirs, stale_min=60) == [ours]
    assert all(path.exists() for path in others)


@pytest.fixture
def live_pid() -> Iterator[int]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield child.pid
    finally:
        child.kill()
        child.wait()


def test_a_lock_whose_owner_runs_stays_however_old(tmp_path: Path, live_pid: int) -> None:
    lock = tmp_path / "gfx942_mlx5" / "0123abcd" / ".ep_internode_v1.hsaco.lock"
    touch(lock, minutes_old=0.01, content=f"{live_pid}\n")  # written after its owner started
    time.sleep(0.1)
    assert remove_stale_locks((LockDir(owner=MORI, path=tmp_path),), stale_min=0.001) == []
    assert lock.exists()


def test_a_lock_older_than_the_process_with_its_pid_names_a_reused_pid(tmp_path: Path, live_pid: int) -> None:
    lock = touch(tmp_path / "gfx942_mlx5" / ".ep_intranode.hsaco.lock", minutes_old=90, content=f"{live_pid}\n")
    assert remove_stale_locks((LockDir(owner=MORI, path=tmp_path),), stale_min=60) == [lock]


@pytest.mark.parametrize("variable", ["AITER_JIT_DIR", "MORI_JIT_CACHE_DIR"])
def test_a_relative_cache_dir_is_refused(variable: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert serve.main(["--json"], k3_env(**{variable: "opt/cache"})) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"{variable}='opt/cache' must be an absolute path" in line
