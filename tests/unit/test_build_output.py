"""What a docker/buildx user expects to see of a build, on the FakeEngine's recorded streams:

``--pull``'s per-layer bytes and rate (redrawn on a terminal, a line every 30 s otherwise), ``--progress
plain`` printing each step's output as it comes, a build log without colour codes, and a failure
that shows a refused loopback connection hinting at ``--network host``.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from imagebuild.build.core import BuildRecord
from imagebuild.build.progress import BuildProgress, ProgressMode, make_progress
from imagebuild.build.pull_progress import format_bytes
from imagebuild.build.stream import ANSI_RE
from imagebuild.errors import BuildError
from imagebuild.project import find_project
from imagebuild.render import RenderOptions, render_inputs
from imagebuild.testing import FakeClock, FakeEngine, RecordedMessage, Recording
from tests import REPO

Replay = Callable[..., tuple[FakeEngine, BuildRecord]]  # the replay fixture (tests/unit/conftest.py)
REF = "127.0.0.1:55000/imagebuild-test/pull-stream:1"


def slowed(recording: Recording, factor: float) -> Recording:
    """The recorded pull as it would come from a registry ``factor`` times slower (loopback is fast)."""
    messages = tuple(RecordedMessage(at=m.at * factor, chunk=m.chunk) for m in recording.messages)
    return Recording(name=recording.name, note=recording.note, dockerfile_sha256="", messages=messages)


class TimedStream(io.StringIO):
    """A stream that notes the fake clock's time of every write."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock, self.times = clock, []  # type: ignore[var-annotated]

    def write(self, text: str, /) -> int:
        self.times.append((self.clock.now(), text))
        return super().write(text)


def pull(build_streams: Path, *, tty: bool, factor: float) -> TimedStream:
    clock = FakeClock()
    engine = FakeEngine(
        clock=clock, pull_streams=[slowed(Recording.load(build_streams / "pull.jsonl"), factor)]
    )
    out = TimedStream(clock)
    listener = BuildProgress(out, tty=tty, width=120).pull_listener(REF, clock)
    listener.close(engine.pull(REF, progress=listener))
    return out


def test_pull_off_a_terminal_says_bytes_and_rates_at_most_every_30_s(build_streams: Path) -> None:
    out = pull(build_streams, tty=False, factor=1000.0)  # the 0.36 s pull stretched to 6 minutes
    lines = out.getvalue().splitlines()
    reports = [(at, text) for at, text in out.times if text.startswith("pulling ")]
    # The first message 30 s in: the 24 MB layer has its first 263 KiB (since 26 s: 4 s), the 1 kB
    # one all of its bytes in its first message, the 6 MB one has not started.
    assert reports[0][1] == (
        f"pulling {REF}: 0/3 layers done, 270kB of 24MB, 9.02kB/s; "
        "downloading 832c3a2b2580 269kB/24MB 67.3kB/s, e7f18d7c01cd 1.16kB/1.16kB -/s\n"
    )
    assert len(reports) >= 3
    started = 1000.0  # FakeClock's start
    assert all(b - a >= 30 for a, b in itertools.pairwise([started] + [at for at, _ in reports]))
    assert re.fullmatch(
        # 30.01 MB in the last message's 346 s
        rf"pulled {re.escape(REF)} \(sha256:[0-9a-f]{{12}}\): 3/3 layers done, 30MB of 30MB, 86.7kB/s in 5m46s",
        lines[-1],
    ), lines[-1]
    assert not ANSI_RE.search(out.getvalue())


def test_pull_on_a_terminal_redraws_one_line_per_layer_in_place(build_streams: Path) -> None:
    out = pull(build_streams, tty=True, factor=10.0)
    screen = render_terminal(out.getvalue())
    # Three layer lines, redrawn where they were, then the summary: nothing scrolled away.
    assert [line.split(":")[0] for line in screen[:3]] == ["832c3a2b2580", "64ed43788e07", "e7f18d7c01cd"]
    assert all(
        line.endswith(("Pull complete 24MB", "Pull complete 6MB", "Pull complete 1.16kB"))
        for line in screen[:3]
    )
    assert re.match(rf"pulled {re.escape(REF)} \(sha256:[0-9a-f]{{12}}\): 3/3 layers done", screen[3])
    assert len(screen) == 4
    frames = [text for _, text in out.times if "Downloading" in text]
    assert frames
    assert all(re.search(r"Downloading \S+/\S+ \S+/s", frame) for frame in frames)


def render_terminal(text: str) -> list[str]:
    """The screen a terminal shows after ``text``: ESC[nF moves up n lines, ESC[2K clears the line."""
    screen: list[str] = [""]
    row = 0
    for token in re.split(r"(\x1b\[\d*[FK]|\n|\r)", text):
        if token == "\n":
            row += 1
            if row == len(screen):
                screen.append("")
        elif token == "\r":
            pass
        elif token.startswith("\x1b["):
            if token.endswith("F"):
                row -= int(token[2:-1] or 1)
            else:
                screen[row] = ""
        elif token:
            screen[row] += token
    return [line for line in screen if line]


def test_format_bytes_is_dockers_decimal_units() -> None:
    assert [format_bytes(n) for n in (512, 1154, 6_002_030, 24_007_502, 1_020_000_000)] == [
        "512B",
        "1.15kB",
        "6MB",
        "24MB",
        "1.02GB",
    ]


def test_progress_plain_prints_every_steps_output_as_it_comes(replay: Replay, build_streams: Path) -> None:
    out = io.StringIO()
    replay("success", progress=make_progress(ProgressMode.PLAIN, out, verbose=False, env={}))
    text = out.getvalue()
    recorded = Recording.load(build_streams / "success.jsonl")
    output = "".join(str(m.chunk.get("stream", "")) for m in recorded.messages if m.chunk)
    wheel = next(line for line in output.splitlines() if "Building wheel for vllm" in line)
    assert ANSI_RE.sub("", wheel).strip() in text
    assert "Step 30/53 : " in text or re.search(r"^Step \d+/\d+ : RUN ", text, re.MULTILINE)
    assert not ANSI_RE.search(text)  # shown as a plain log: the builder's red taken out
    # auto off a terminal stays the short form: start and end lines, heartbeats.
    quiet = io.StringIO()
    replay("success", progress=make_progress(ProgressMode.AUTO, quiet, verbose=False, env={}))
    assert ANSI_RE.sub("", wheel).strip() not in quiet.getvalue()


def test_the_build_log_has_no_colour_codes(replay: Replay, build_streams: Path, tmp_path: Path) -> None:
    recorded = (build_streams / "success.jsonl").read_text()
    assert "\\u001b[91m" in recorded  # the classic builder paints a step's stderr red
    replay("success", log_path=tmp_path / "build.log")
    log = (tmp_path / "build.log").read_text()
    assert "\x1b" not in log
    assert "Successfully built" in log


def test_a_refused_loopback_connection_hints_at_network_host(replay: Replay, build_streams: Path) -> None:
    """The sample world's build on the default network, recorded (record_more.py): pip's index on 127.0.0.1 refused."""
    pins = build_streams / "loopback" / "pins.toml"
    recording = Recording.load(build_streams / "loopback" / "failure.jsonl")
    rendered = render_inputs(find_project(REPO, pins).load("gfx942"), RenderOptions()).text
    assert hashlib.sha256(rendered.encode()).hexdigest() == recording.dockerfile_sha256, (
        "stages/ changed since loopback/ was recorded: python tests/data/build_streams/record_more.py"
    )
    with pytest.raises(BuildError) as e:
        replay(recording, pins=pins, network=None)
    first = str(e.value).splitlines()[0]
    assert first.startswith("step 4/18 'Constraint proof, then MoRI from source' failed (stages/04-mori.toml")
    assert first.endswith("if the source is served on this machine, build with --network host")
    # Built with --network host already (a source that really is down): no such hint.
    with pytest.raises(BuildError) as e:
        replay(recording, pins=pins, network="host")
    assert "--network host" not in str(e.value).splitlines()[0]


def test_other_failures_get_no_network_hint(replay: Replay, vllm_bad_pins: Path) -> None:
    with pytest.raises(BuildError) as e:
        replay("failure", pins=vllm_bad_pins, network=None)
    assert "--network host" not in str(e.value)


def test_build_pull_shows_each_images_layers_before_the_steps(replay: Replay, build_streams: Path) -> None:
    pulled = slowed(Recording.load(build_streams / "pull.jsonl"), 1000.0)
    out = io.StringIO()
    engine, _ = replay(
        "cached", pull=True, engine=FakeEngine(pull_streams=[pulled]), progress=BuildProgress(out)
    )
    assert len(engine.pulls) == 2  # the base and the donor, by digest
    lines = out.getvalue().splitlines()
    summaries = [line for line in lines if line.startswith("pulled ")]
    assert summaries[0].startswith(f"pulled {engine.pulls[0]} (sha256:")
    assert summaries[0].endswith("3/3 layers done, 30MB of 30MB, 86.7kB/s in 5m46s")
    assert "up to date, no layer downloaded" in summaries[1]  # the donor: no stream recorded for it
    assert any(line.startswith(f"pulling {engine.pulls[0]}: ") for line in lines)
    assert lines.index(summaries[1]) < next(i for i, line in enumerate(lines) if line.startswith("[1/18]"))
