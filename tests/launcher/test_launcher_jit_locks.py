"""Stale JIT lock cleanup: old lock files go (each logged), fresh ones and everything else stay."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from imagebuild.launcher.jit_locks import LockDir, remove_stale_locks

MINUTE = 60.0


def touch(path: Path, *, minutes_old: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("12345\n")
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
    dirs = (
        LockDir(owner="AITER", path=tmp_path / "aiter_jit"),
        LockDir(owner="MoRI", path=tmp_path / "mori_jit"),
    )
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
    removed = remove_stale_locks((LockDir(owner="AITER", path=tmp_path / "aiter_jit"),), stale_min=120)
    assert removed == [caches["aiter_clone"]]


def test_symlinks_are_neither_followed_nor_removed(tmp_path: Path) -> None:
    outside = touch(tmp_path / "elsewhere" / "lock_precious", minutes_old=600)
    cache = tmp_path / "aiter_jit"
    cache.mkdir()
    (cache / "lock_link").symlink_to(outside)
    (cache / "linked_dir").symlink_to(outside.parent, target_is_directory=True)
    assert remove_stale_locks((LockDir(owner="AITER", path=cache),), stale_min=60) == []
    assert outside.exists()
    assert (cache / "lock_link").is_symlink()


def test_a_missing_cache_is_nothing_to_clean(tmp_path: Path) -> None:
    assert remove_stale_locks((LockDir(owner="MoRI", path=tmp_path / "absent"),), stale_min=60) == []
