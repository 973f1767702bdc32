"""Normalising ahead of the build's end: which commits start a round, what each round is given, and
what is left in the engine afterwards. The rounds' normalisation itself is the docker tier's
(test_engine_identity: the same identity with and without it); here it is a stand-in that records."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from imagebuild.build.prepare import BuildOptions, prepare_build
from imagebuild.build.stream import StepTracker
from imagebuild.cli import arguments, main
from imagebuild.engine.interface import ImageInfo
from imagebuild.errors import ExitCode
from imagebuild.normalize import ahead as ahead_module
from imagebuild.normalize import core
from imagebuild.normalize.after_build import normalize_build
from imagebuild.normalize.ahead import NormalizeAhead
from imagebuild.normalize.model import (
    RULES,
    AheadWork,
    LayerNote,
    LayerPlan,
    NormalizeFailure,
    NormalizeResult,
    StoreUnavailable,
)
from imagebuild.project import find_project
from imagebuild.testing import FakeClock, FakeEngine, Recording, image_info
from imagebuild.util import cpu
from tests.unit.render_support import sample_dockerfile

REPO = Path(__file__).resolve().parents[2]
BUILD_STREAMS = REPO / "tests" / "data" / "build_streams"
MB = 10**6
BASE = "sha256:" + "0" * 64


def image(n: int, size_mb: float, *, tags: tuple[str, ...] = ()) -> ImageInfo:
    return replace(image_info(f"sha256:{n:064x}", tags=tags), size=int(size_mb * MB))


def note(n: int) -> LayerNote:
    return LayerNote(built=f"sha256:{n:064x}", epoch=1, pinned=False, diff_id=f"sha256:{n + 100:064x}")


class Counting(FakeEngine):
    """A FakeEngine that counts its inspects."""

    def __init__(self, images: list[ImageInfo]) -> None:
        super().__init__(images=images)
        self.inspected: list[str] = []

    def inspect_image(self, ref: str) -> ImageInfo:
        self.inspected.append(ref)
        return super().inspect_image(ref)


@dataclass
class Rounds:
    """Stands in for normalize_image: records each round's image and plan; ``gate`` holds a round."""

    images: list[str] = field(default_factory=list)
    plans: list[LayerPlan] = field(default_factory=list)
    gate: threading.Event = field(default_factory=threading.Event)
    fail: str = ""
    unavailable: bool = False  # the failure is the store's (StoreUnavailable)

    def __post_init__(self) -> None:
        self.gate.set()

    def __call__(self, store: object, image_id: str, plan: LayerPlan, spool_dir: Path, **options: bool) -> NormalizeResult:
        assert options == ({"save_fallback": False} if plan.prefix else {})  # a round never saves the whole image
        self.gate.wait(10)
        if self.fail:
            raise (StoreUnavailable if self.unavailable else NormalizeFailure)(self.fail)
        self.images.append(image_id)
        self.plans.append(plan)
        number = len(self.images)
        return NormalizeResult(
            image_id=f"sha256:{900 + number:064x}",
            engine_id=f"sha256:{900 + number:064x}",
            unnormalized_id=image_id,
            layers_rewritten=1,
            bytes_rewritten=5 * MB,
            spool_peak=0,
            seconds=0.1,
            layers=(*plan.previous, note(number)),
        )


@pytest.fixture
def rounds(monkeypatch: pytest.MonkeyPatch) -> Rounds:
    stand_in = Rounds()
    monkeypatch.setattr(core, "normalize_image", stand_in)
    return stand_in


def plan_of(image_id: str) -> LayerPlan:
    return LayerPlan(layers=(), base_layers=0, base_history=0, epochs=(1,), created=1)


def ahead(
    engine: FakeEngine,
    tmp_path: Path,
    *,
    min_mb: int = 10,
    previous: tuple[LayerNote, ...] = (),
    idle: Callable[[], float] = lambda: 2.0,
) -> NormalizeAhead:
    return NormalizeAhead(engine, plan_of, tmp_path, min_bytes=min_mb * MB, previous=previous, idle=idle)


def base_committed(tmp_path: Path, idle: Callable[[], float] = lambda: 2.0) -> tuple[Counting, NormalizeAhead]:
    """Work ahead of a build whose FROM (image 0) is committed; its next image (1) adds 20 MB."""
    engine = Counting([image(0, 0), image(1, 20)])
    work = ahead(engine, tmp_path, idle=idle)
    work.committed(f"sha256:{0:064x}", 1, True)
    return engine, work


def test_a_round_starts_once_the_uncached_steps_added_enough(tmp_path: Path, rounds: Rounds) -> None:
    engine = Counting([image(0, 300), image(1, 305), image(2, 316), image(3, 320), image(4, 331)])
    work = ahead(engine, tmp_path, previous=(note(50),))
    work.committed(f"sha256:{0:064x}", 1, True)  # the stage's FROM: the base, what is counted from
    for n, step in ((1, 2), (2, 4), (3, 4), (4, 7)):
        commit(work, engine, n, step)
    # +5 MB: not yet; +16: a round; +4 since: not; +15 since: a round, given the first round's notes
    assert rounds.images == [f"sha256:{2:064x}", f"sha256:{4:064x}"]
    assert all(plan.prefix for plan in rounds.plans)
    assert rounds.plans[0].previous == (note(50),)  # the last build's, so a round reuses what that made
    assert rounds.plans[1].previous == (note(50), note(1))
    assert work.finish() == (note(50), note(1), note(2))
    assert (work.work.prefixes, work.work.layers, work.work.bytes) == (2, 2, 10 * MB)


def test_a_fully_cached_build_asks_the_engine_nothing(tmp_path: Path, rounds: Rounds) -> None:
    engine = Counting([image(0, 300), image(1, 900)])
    work = ahead(engine, tmp_path, min_mb=0)
    work.committed(f"sha256:{0:064x}", 1, True)
    work.committed(f"sha256:{1:064x}", 7, True)
    assert work.finish() == ()
    assert (engine.inspected, rounds.images) == ([], [])


def test_commits_during_a_round_are_not_queued_only_the_newest_is_looked_at(tmp_path: Path, rounds: Rounds) -> None:
    engine = Counting([image(0, 0), image(1, 20), image(2, 40), image(3, 60), image(4, 80)])
    work = ahead(engine, tmp_path)
    work.committed(f"sha256:{0:064x}", 1, True)
    rounds.gate.clear()
    work.committed(f"sha256:{1:064x}", 4, False)
    _wait_for(lambda: f"sha256:{1:064x}" in engine.inspected)  # the round on image 1 is under way
    for n in (2, 3, 4):
        work.committed(f"sha256:{n:064x}", 5, False)
    rounds.gate.set()
    _wait_for(lambda: len(rounds.images) == 2)
    work.finish()
    assert rounds.images == [f"sha256:{1:064x}", f"sha256:{4:064x}"]
    assert f"sha256:{2:064x}" not in engine.inspected
    assert f"sha256:{3:064x}" not in engine.inspected


def test_a_due_round_waits_for_an_idle_core(
    tmp_path: Path, rounds: Rounds, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beside a step that keeps every core busy a round would slow the build: it starts once one is free."""
    monkeypatch.setattr(ahead_module, "RECHECK_S", 0.01)
    idle = [0.3, 0.8, 0.0, 1.6]  # cores idle at each look; then one is
    _, work = base_committed(tmp_path, idle=lambda: idle.pop(0) if len(idle) > 1 else idle[0])
    work.committed(f"sha256:{1:064x}", 4, False)
    _wait_for(lambda: len(rounds.images) == 1)
    assert idle == [1.6]  # looked four times, started on the fourth
    assert work.finish() == (note(1),)


def test_a_round_never_started_when_no_core_came_free(tmp_path: Path, rounds: Rounds, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ahead_module, "RECHECK_S", 0.01)
    looks: list[float] = []

    def busy() -> float:
        looks.append(0.2)
        return 0.2

    _, work = base_committed(tmp_path, idle=busy)
    work.committed(f"sha256:{1:064x}", 4, False)
    _wait_for(lambda: len(looks) >= 3)  # it keeps looking while the build runs
    assert work.finish() == ()  # the build ended first: all of it is done after the build
    assert (rounds.images, work.work) == ([], AheadWork())


def test_no_round_starts_once_the_build_has_ended(tmp_path: Path, rounds: Rounds) -> None:
    """A round found due just before the build's end would only add a load: the normalisation after
    the build does the same work in one go."""
    work: NormalizeAhead

    def idle_once_the_build_ended() -> float:
        threading.Thread(target=work.finish).start()  # the build ends while the round looks for a core
        time.sleep(0.2)
        return 2.0

    engine, work = base_committed(tmp_path, idle=idle_once_the_build_ended)
    work.committed(f"sha256:{1:064x}", 18, False)
    _wait_for(lambda: f"sha256:{1:064x}" in engine.inspected)
    assert work.finish() == ()
    assert (rounds.images, work.work) == ([], AheadWork())


def test_finish_waits_for_the_round_under_way(tmp_path: Path, rounds: Rounds) -> None:
    engine, work = base_committed(tmp_path)
    rounds.gate.clear()
    work.committed(f"sha256:{1:064x}", 4, False)
    _wait_for(lambda: f"sha256:{1:064x}" in engine.inspected)
    threading.Timer(0.2, rounds.gate.set).start()
    assert work.finish() == (note(1),)  # the round's notes: the normalisation after the build reuses them


def test_a_failed_round_stops_the_work_ahead_and_says_why(
    tmp_path: Path, rounds: Rounds, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Counting([image(0, 0), image(1, 20), image(2, 40)])
    rounds.fail = "the layer store's layers are not the ones the engine reported"
    work = ahead(engine, tmp_path, previous=(note(50),))
    work.committed(f"sha256:{0:064x}", 1, True)
    work.committed(f"sha256:{1:064x}", 4, False)
    _wait_for(lambda: bool(work.work.stopped))
    work.committed(f"sha256:{2:064x}", 7, False)
    assert work.finish() == (note(50),)  # nothing of its own: the normalisation after the build does it all
    assert work.work.stopped == rounds.fail
    assert f"sha256:{2:064x}" not in engine.inspected
    assert "normalising ahead of the build stopped (the layer store's layers" in caplog.text


def test_only_the_prefixes_this_run_loaded_are_removed(tmp_path: Path, rounds: Rounds) -> None:
    engine = Counting([image(0, 0), image(1, 20), image(2, 40), image(3, 60), image(50, 0)])
    work = ahead(engine, tmp_path)
    work.committed(f"sha256:{0:064x}", 1, True)
    for n in (1, 2, 3):
        commit(work, engine, n, n + 3)
    work.finish()
    engine.images += [image(901, 0), image(902, 0), image(903, 0, tags=("someone/named:it",))]  # the rounds' results
    work.remove_prefixes(keep="")
    assert not engine.has_image(f"sha256:{901:064x}")
    assert not engine.has_image(f"sha256:{902:064x}")
    assert engine.has_image(f"sha256:{903:064x}")  # it has a name now: not ours to remove
    assert engine.has_image(f"sha256:{50:064x}")  # not a round's


def test_the_final_image_is_never_removed(tmp_path: Path, rounds: Rounds) -> None:
    engine, work = base_committed(tmp_path)
    commit(work, engine, 1, 18)  # the last step's commit: the round made the final image
    work.finish()
    engine.images.append(image(901, 0))
    work.remove_prefixes(keep=f"sha256:{901:064x}")
    assert engine.has_image(f"sha256:{901:064x}")


def test_the_normalisation_after_the_build_starts_from_the_notes_made_ahead(
    tmp_path: Path, rounds: Rounds, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This run's notes for the layers normalised ahead, the last build's for the layers above them."""
    dockerfile = sample_dockerfile()
    built = replace(image(7, 0), layers=("sha256:1", "sha256:2", "sha256:3", "sha256:4"))
    base = replace(image(8, 0, tags=("base@sha256:0",)), layers=("sha256:1",))
    engine = FakeEngine(images=[built, base])
    record = tmp_path / "record.json"
    last_build = [note(60), note(61), note(62)]
    layers = [{"built": n.built, "epoch": n.epoch, "pinned": n.pinned, "diff_id": n.diff_id} for n in last_build]
    record.write_text(json.dumps({"image_id": BASE, "normalization": {"rules": RULES, "layers": layers}}))
    work = ahead(engine, tmp_path, min_mb=10**6, previous=(note(1),))  # as if a round had made note(1)
    result = normalize_build(
        engine,
        built.id,
        tag="imagebuild/kimi-k3:gfx942",
        base_ref="base@sha256:0",
        dockerfile=dockerfile,
        spool_dir=tmp_path,
        record_path=record,
        ahead=work,
    )
    assert rounds.plans[-1].previous == (note(1), note(61), note(62))
    assert not rounds.plans[-1].prefix
    assert result.result.ahead == work.work


@pytest.mark.parametrize(("name", "all_cached"), [("cached", True), ("success", False)])
def test_the_build_stream_reports_each_commit_of_the_final_stage(build_streams: Path, name: str, all_cached: bool) -> None:
    """Each image the classic builder commits in the final stage, with its step and cache hit; the
    donor stage's are not the image's."""
    project = find_project(REPO, build_streams / "pins.toml")
    prepared = prepare_build(project, project.load("gfx942"), BuildOptions(arch="gfx942", network="host", normalize=False))
    commits: list[tuple[str, int, bool]] = []
    tracker = StepTracker(prepared.dockerfile, FakeClock(), _Silent(), committed=lambda *c: commits.append(c))
    for message in Recording.load(build_streams / f"{name}.jsonl").messages:
        tracker.feed(str(message.chunk.get("stream", "")))
    tracker.finish()
    assert commits[0][1:] == (1, True)  # the FROM: the base, from the cache
    assert [step for _, step, _ in commits] == sorted(step for _, step, _ in commits)
    assert {step for _, step, _ in commits} == set(range(1, 19))
    assert all(len(image) == 12 for image, _, _ in commits)
    assert all(cached for _, _, cached in commits) == all_cached
    assert "09d53755dc3a" not in {image for image, _, _ in commits}  # the donor stage's FROM


def test_the_size_is_a_whole_number_of_mb_or_off() -> None:
    assert (arguments.normalize_ahead("off"), arguments.normalize_ahead("0"), arguments.normalize_ahead("500")) == (
        None,
        0,
        500,
    )
    for bad in ("-1", "1.5", "5GB", "", "١٢", "1" * 10):
        with pytest.raises(Exception, match="not a size"):
            arguments.normalize_ahead(bad)


def test_normalize_ahead_with_no_normalize_is_refused_before_the_engine_is_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["-C", str(REPO), "build", "--normalize-ahead", "100", "--no-normalize"])
    assert code == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    assert "--normalize-ahead with --no-normalize" in err
    assert len(err.strip().splitlines()) == 1


class _Silent:
    def step_started(self, number: int, total: int, title: str) -> None: ...
    def step_output(self, line: str) -> None: ...
    def step_running(self, step: object) -> None: ...
    def step_finished(self, timing: object, total: int) -> None: ...


def commit(work: NormalizeAhead, engine: Counting, n: int, step: int) -> None:
    """Image ``n`` committed uncached, once the worker has begun to look at it: it finishes with it
    (and its round, if any) before it takes the next commit, so the commits are looked at one by one."""
    work.committed(f"sha256:{n:064x}", step, False)
    _wait_for(lambda: f"sha256:{n:064x}" in engine.inspected)


def _wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            msg = "timed out"
            raise AssertionError(msg)
        time.sleep(0.005)


def test_idle_cores_are_the_idle_share_of_the_time_between_two_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 50 0 50 400 0 0 0 0 0 0\n")
    # 150 user, 50 system, 100 idle and 100 waiting on the disk between the reads: half the time idle
    monkeypatch.setattr(cpu.time, "sleep", lambda _: stat.write_text("cpu  250 0 150 900 100 0 0 0 0 0\n"))
    monkeypatch.setattr(cpu.os, "cpu_count", lambda: 2)
    assert cpu.idle_cores(stat=stat) == 1.0
    assert cpu.idle_cores(stat=tmp_path / "absent") == 2.0  # nothing to go by: as if idle


def test_an_engine_whose_store_cannot_be_read_here_is_left_to_the_save_after_the_build(
    tmp_path: Path, rounds: Rounds, caplog: pytest.LogCaptureFixture
) -> None:
    """A remote engine: no round can read its store, and the normalisation after the build says how it
    read the image; no warning from here."""
    rounds.fail = "the engine at tcp://build-host:2376 is remote: its store cannot be read from here"
    rounds.unavailable = True
    engine, work = base_committed(tmp_path)
    commit(work, engine, 1, 4)
    assert work.finish() == ()
    assert work.work.stopped == rounds.fail
    assert "warning" not in caplog.text
