"""Build progress on the FakeEngine and a fake clock: start lines, heartbeats in silence, tty, GitHub groups."""

from __future__ import annotations

import io
import itertools
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from imagebuild.build.core import BuildRecord
from imagebuild.build.progress import BuildProgress, ProgressMode, make_progress
from imagebuild.build.stream import StepTiming
from imagebuild.errors import BuildError
from imagebuild.testing import FakeClock, FakeEngine, Recording

Replay = Callable[..., tuple[FakeEngine, BuildRecord]]  # the replay fixture (tests/unit/conftest.py)

SILENT_AFTER = "Building wheel for vllm (pyproject.toml): started"


@pytest.fixture
def silent_vllm_build(build_streams: Path) -> Recording:
    """The cold build with the vLLM wheel build printing nothing for over two minutes."""
    return Recording.load(build_streams / "success.jsonl").stretched(SILENT_AFTER, pause=125.0)


def test_a_silent_step_gets_a_heartbeat_every_30_s_with_its_last_line(
    replay: Replay, silent_vllm_build: Recording
) -> None:
    out = io.StringIO()
    _, record = replay(silent_vllm_build, progress=BuildProgress(out))
    beats = [line for line in out.getvalue().splitlines() if ": running for " in line]
    vllm = [line for line in beats if line.startswith("[7/18] vLLM fork, full source compile: running for")]
    assert len(vllm) == 4, beats  # 125 s of silence: at 30, 60, 90 and 120 s, not more often
    assert all(line.endswith(f"; last output: {SILENT_AFTER.strip()}") for line in vllm)
    seconds = [_seconds(re.search(r"running for (\S+);", line)[1]) for line in vllm]  # type: ignore[index]
    # 30 s apart; each shown rounded to the second, so two may read 29 s apart
    assert all(b - a >= 29 for a, b in itertools.pairwise(seconds))
    assert record.steps[6].seconds > 125


def test_tty_redraws_one_live_line_and_keeps_only_finished_steps(
    replay: Replay, silent_vllm_build: Recording
) -> None:
    out = io.StringIO()
    replay(silent_vllm_build, progress=BuildProgress(out, tty=True, width=70))
    text = out.getvalue()
    permanent = [line.rsplit("\x1b[2K", 1)[-1] for line in text.split("\n") if line]
    finished = [line for line in permanent if line.startswith("[")]
    assert [line.split("]")[0] for line in finished] == [f"[{n}/18" for n in range(1, 19)]
    assert all(not line.endswith(" ...") for line in finished)  # no start lines on a terminal
    assert ": running for" not in text  # the live line is the heartbeat
    live = [frame for frame in text.split("\r\x1b[2K") if frame.startswith("[7/18]") and "\n" not in frame]
    assert any("2m0" in frame for frame in live)  # its elapsed time kept counting in the silence
    assert all(len(frame) <= 69 for frame in live)
    assert text.endswith(("\r\x1b[2K", "\n"))


def test_github_actions_folds_each_step_and_closes_the_group_on_failure(
    replay: Replay, vllm_bad_pins: Path
) -> None:
    out = io.StringIO()
    progress = make_progress(ProgressMode.AUTO, out, verbose=False, env={"GITHUB_ACTIONS": "true"})
    with pytest.raises(BuildError):
        replay("failure", pins=vllm_bad_pins, progress=progress)
    lines = out.getvalue().splitlines()
    groups = [i for i, line in enumerate(lines) if line.startswith("::group::")]
    ends = [i for i, line in enumerate(lines) if line == "::endgroup::"]
    assert len(groups) == len(ends) == 7
    assert lines[groups[-1]] == "::group::[7/18] vLLM fork, full source compile"
    inside = lines[groups[-1] : ends[-1]]
    assert "fatal: remote error: upload-pack: not our ref" in "\n".join(inside)  # the output, folded
    token = lines[groups[-1] + 1].removeprefix("::stop-commands::")
    assert re.fullmatch(r"[0-9a-f]{32}", token)
    assert lines[ends[-1] - 1] == f"::{token}::"


def test_build_output_cannot_issue_workflow_commands() -> None:
    out = io.StringIO()
    progress = BuildProgress(out, groups=True)
    progress.step_started(4, 18, "MoRI")
    progress.step_output("::add-mask::nothing::endgroup::")
    progress.step_finished(StepTiming(number=4, title="MoRI", seconds=1.0, cached=False), 18)
    lines = out.getvalue().splitlines()
    token = lines[1].removeprefix("::stop-commands::")
    assert lines == [
        "::group::[4/18] MoRI",
        f"::stop-commands::{token}",
        "::add-mask::nothing::endgroup::",
        f"::{token}::",
        "::endgroup::",
        "[4/18] MoRI ... 1.0s",
    ]


def test_auto_is_tty_only_on_a_terminal_and_groups_only_in_github_actions() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    def shown(progress: BuildProgress) -> str:
        progress.step_started(1, 18, "Base image")
        progress.close()
        return progress._stream.getvalue()  # type: ignore[attr-defined]

    assert (
        shown(make_progress(ProgressMode.AUTO, io.StringIO(), verbose=False, env={}))
        == "[1/18] Base image ...\n"
    )
    assert "\r\x1b[2K[1/18] Base image" in shown(
        make_progress(ProgressMode.AUTO, Terminal(), verbose=False, env={})
    )
    assert "\x1b" in shown(make_progress(ProgressMode.TTY, io.StringIO(), verbose=False, env={}))
    gha = {"GITHUB_ACTIONS": "true"}
    assert shown(make_progress(ProgressMode.PLAIN, io.StringIO(), verbose=False, env=gha)).startswith(
        "::group::"
    )
    assert "::group::" not in shown(make_progress(ProgressMode.TTY, io.StringIO(), verbose=False, env=gha))


def test_verbose_plain_shows_the_build_output_in_order(replay: Replay) -> None:
    out = io.StringIO()
    replay("cached", progress=BuildProgress(out, verbose=True))
    text = out.getvalue()
    first = re.search(r"Step 1/\d+ : ARG BASE_IMAGE=", text)
    assert first is not None
    assert first.start() < text.index("[1/18] Base image ...")
    assert " ---> Using cache" in text


def test_fake_clock_fires_due_timers_in_order_and_not_after_cancel() -> None:
    clock = FakeClock(start=0.0)
    fired: list[tuple[str, float]] = []
    fast = clock.every(1.0, lambda: fired.append(("fast", clock.now())))
    clock.every(2.5, lambda: fired.append(("slow", clock.now())))
    clock.advance(3.0)
    assert fired == [("fast", 1.0), ("fast", 2.0), ("slow", 2.5), ("fast", 3.0)]
    fast.cancel()
    clock.advance(2.0)
    assert fired[4:] == [("slow", 5.0)]
    assert clock.now() == 5.0


def test_every_scenario_is_recorded(build_streams: Path) -> None:
    assert sorted(p.name for p in build_streams.glob("*.jsonl")) == [
        "cached.jsonl",
        "engine-lost.jsonl",
        "failure.jsonl",
        "pull.jsonl",  # record_more.py's, as loopback/failure.jsonl
        "success.jsonl",
    ]


def _seconds(text: str) -> float:
    if "m" in text:
        minutes, secs = text.rstrip("s").split("m")
        return int(minutes) * 60 + int(secs)
    return float(text.rstrip("s"))
