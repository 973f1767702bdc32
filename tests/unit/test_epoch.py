"""SOURCE_DATE_EPOCH: per step, from the git pins' commit times, declared where it rises."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import pytest

from imagebuild.build.core import check_build_args
from imagebuild.cli import main
from imagebuild.errors import ConfigError, UnpinnedError
from imagebuild.pins import load_pins, render_updates
from imagebuild.pins.epoch import FLOOR, format_epoch
from imagebuild.project import find_project
from imagebuild.render import Dockerfile, RenderOptions, render_inputs
from imagebuild.render.plan import invalidated_steps
from tests.unit.apt_support import write_apt_lock

REPO = Path(__file__).resolve().parents[2]
MORI, VLLM, ROUTER = "2026-01-01T02:00:00Z", "2026-01-01T03:00:00Z", "2026-01-01T02:30:00Z"
NIXL_TIME = "2025-09-29T13:50:29Z"
EPOCH_ARG = re.compile(r'^ARG SOURCE_DATE_EPOCH="(\d+)"$')


def lock_all(project: Path, *, mori: str = MORI, vllm: str = VLLM, router: str = ROUTER) -> None:
    """The checkout's pins with every identity filled, commit times as given (mori, vllm, router)."""
    path = project / "pins.toml"
    text = (REPO / "pins.toml").read_text().replace('digest = ""', f'digest = "sha256:{"ab" * 32}"')
    text = text.replace('sha256 = ""', f'sha256 = "{"cd" * 32}"')
    text = text.replace('snapshot = ""', 'snapshot = "20240301T030400Z"')
    parts = re.split(r'committed = "[^"]*"', text)
    # mori, vllm and router in file order, then the NIXL layer's git pins (off for gfx942: their times
    # never reach its epoch, so any fixed time does)
    assert len(parts) == 8, "mori, vllm, router, then ucx, rixl, rocshmem, deepep"
    times = (mori, vllm, router, *[NIXL_TIME] * (len(parts) - 4))
    text = "".join(part + f'committed = "{t}"' for part, t in zip(parts, times, strict=False))
    path.write_text(text + parts[-1])
    # As `imagebuild lock` writes them: fingerprinted (a time typed over a locked one is refused).
    stamps = {
        p.name: {"fingerprint": p.with_fingerprint().fingerprint or ""}
        for p in load_pins(path)
        if p.declared_keys
    }
    path.write_text(render_updates(path, stamps))
    write_apt_lock(path)  # step 4's packages, as lock resolves them beside the pins


def rendered(project: Path, **options: object) -> Dockerfile:
    inputs = find_project(project).load("gfx942")
    return render_inputs(inputs, RenderOptions(**options))  # type: ignore[arg-type]


def declarations(dockerfile: Dockerfile) -> dict[int, int]:
    """step -> the SOURCE_DATE_EPOCH declared just before it."""
    found: dict[int, int] = {}
    for line in dockerfile.lines:
        match = EPOCH_ARG.match(line.text)
        if match:
            assert line.step is not None
            found[line.step] = int(match[1])
    return found


def utc(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())


def test_epoch_is_declared_before_the_first_run_and_where_it_rises(project: Path) -> None:
    lock_all(project)
    dockerfile = rendered(project)
    # mori (step 4) is the first git pin; vllm (step 7) is newer; router (step 9) is older than vllm.
    assert declarations(dockerfile) == {4: utc(MORI), 7: utc(VLLM)}
    epochs = {s.number: s.source_date_epoch for s in dockerfile.steps}
    assert [epochs[n] for n in (1, 2, 3)] == [FLOOR] * 3
    assert [epochs[n] for n in (4, 5, 6)] == [utc(MORI)] * 3
    assert {epochs[n] for n in range(7, 19)} == {utc(VLLM)}


def test_a_newer_router_moves_the_epoch_of_its_step_and_later_only(project: Path) -> None:
    lock_all(project)
    before = rendered(project)
    lock_all(project, router="2026-02-01T00:00:00Z")
    after = rendered(project)
    assert declarations(after) == {4: utc(MORI), 7: utc(VLLM), 9: utc("2026-02-01T00:00:00Z")}
    changed = {
        line.step
        for line in after.lines
        if line.final_stage and line.text not in {x.text for x in before.lines}
    }
    assert changed == {9}  # the router's own step: the layer cache breaks there, as for its commit
    assert [s.number for s in invalidated_steps(after, "router")] == list(range(9, 19))
    assert after.steps[-1].source_date_epoch == utc("2026-02-01T00:00:00Z")


def test_epoch_is_not_a_build_argument(project: Path) -> None:
    lock_all(project)
    inputs = find_project(project).load("gfx942")
    with pytest.raises(ConfigError, match="SOURCE_DATE_EPOCH: not a build tunable"):
        check_build_args({"SOURCE_DATE_EPOCH": "0"}, inputs)


def test_missing_commit_time_is_refused_like_a_missing_identity(project: Path) -> None:
    lock_all(project, vllm="")
    with pytest.raises(UnpinnedError, match=r"\[vllm\] \(commit time\).*imagebuild lock"):
        rendered(project)
    loud = rendered(project, allow_unpinned=True).text
    assert "vllm (commit time)" in loud
    assert declarations(rendered(project, allow_unpinned=True)) == {4: utc(MORI), 9: utc(ROUTER)}


@pytest.mark.parametrize("verb", ["render", "build"])
def test_a_hand_edited_commit_is_refused_never_rendered_with_the_old_time(
    project: Path, verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The recorded time is the old commit's: the fingerprint says the commit changed since the lock."""
    lock_all(project)
    path = project / "pins.toml"
    path.write_text(path.read_text().replace("862bfd8ca4db78b9cbcbcf9ec6013638e3ae6543", "1" * 40))
    before = path.read_bytes()
    assert main(["-C", str(project), verb, *(["-o", "-"] if verb == "render" else [])]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "[vllm] (vllm's identity was edited by hand since `imagebuild lock` recorded it)" in lines[0]
    assert "run `imagebuild lock`" in lines[0]
    assert path.read_bytes() == before
    # Shown loudly, it gives no SOURCE_DATE_EPOCH: steps 7-8 keep mori's time, the router's rises at 9.
    assert declarations(rendered(project, allow_unpinned=True)) == {4: utc(MORI), 9: utc(ROUTER)}


def test_an_edited_ref_is_refused_until_lock_resolves_it(project: Path) -> None:
    lock_all(project)
    path = project / "pins.toml"
    path.write_text(
        path.read_text().replace('branch = "kimi-k3-wideep-disagg-fullsource-v3"', 'branch = "main"')
    )
    with pytest.raises(UnpinnedError, match=r"\[vllm\] \(pins.toml changed: vllm now tracks branch main\)"):
        rendered(project)


def test_format_epoch_is_rfc3339_utc() -> None:
    assert format_epoch(FLOOR) == "1980-01-01T00:00:00Z"
    assert format_epoch(utc(VLLM)) == VLLM
