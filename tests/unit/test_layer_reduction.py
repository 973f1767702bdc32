"""Build layers reduced against the layers below, as the normaliser chains them (no engine)."""

from __future__ import annotations

import io
import tarfile

from imagebuild.normalize.canonical import LayerReducer
from imagebuild.normalize.lower import LowerState, scan_layer
from imagebuild.normalize.rewrite import rewrite_layer
from tests.unit.imagetars import BEFORE, EPOCH, Item, entries, layer

REAL_TIME = EPOCH + 86400 * 30  # what the docker CLI sends for a context file: after the epoch


def normalise(stack: list[tuple[bytes, bool]], base_items: tuple[Item, ...] = ()) -> list[dict[str, int]]:
    """Each build layer's written entries -> mtime; ``stack`` is (layer, a context COPY) above a base."""
    base = layer([Item("opt/", tarfile.DIRTYPE, mode=0o755, mtime=BEFORE), *base_items])
    lower = LowerState()
    lower.apply(scan_layer(io.BytesIO(base), digests=True))
    written = []
    for data, copies_context in stack:
        out = io.BytesIO()
        result = rewrite_layer(
            io.BytesIO(data), out, EPOCH, reducer=LayerReducer(lower, EPOCH), pin_times=copies_context
        )
        lower.apply(result.held, result.written_mtimes)
        written.append({info.name: int(info.mtime) for info, _ in entries(out.getvalue())})
    return written


def build(context_mtime: float) -> list[tuple[bytes, bool]]:
    """COPY of the context into /opt/app, then a RUN that adds a file under it (the parents untouched)."""
    copy = layer([
        Item("opt/", tarfile.DIRTYPE, mode=0o755, mtime=REAL_TIME),
        Item("opt/app/", tarfile.DIRTYPE, mode=0o755, mtime=context_mtime),
        Item("opt/app/run.sh", data=b"#!/bin/sh\n", mode=0o755, mtime=context_mtime),
    ])  # fmt: skip
    run = layer([
        Item("opt/", tarfile.DIRTYPE, mode=0o755, mtime=REAL_TIME),
        Item("opt/app/", tarfile.DIRTYPE, mode=0o755, mtime=context_mtime),  # its parent, unchanged
        Item("opt/app/built/", tarfile.DIRTYPE, mode=0o755, mtime=REAL_TIME),
        Item("opt/app/built/out", data=b"compiled\n", mtime=REAL_TIME),
    ])  # fmt: skip
    return [(copy, True), (run, False)]


def test_an_untouched_parent_gets_the_normalised_time_below_whichever_client_sent_the_context() -> None:
    by_imagebuild = normalise(build(0))  # imagebuild's context tar stamps 0
    by_docker_cli = normalise(build(REAL_TIME))  # the CLI sends the files' real times
    assert by_imagebuild == by_docker_cli
    assert by_imagebuild[1]["opt/app"] == EPOCH  # what the normalised COPY layer gave it


def test_a_parent_left_out_of_a_layer_keeps_the_time_of_the_layer_that_wrote_it() -> None:
    """A layer that changes nothing under /opt/app leaves it out; the next one still sees its written time."""
    stack = build(0)
    untouched = layer([Item("etc/", tarfile.DIRTYPE, mode=0o755), Item("etc/motd", data=b"hi\n")])
    stack.insert(1, (untouched, False))
    written = normalise(stack)
    assert "opt/app" not in written[1]
    assert written[2]["opt/app"] == EPOCH


def test_a_directory_the_step_touched_keeps_its_own_clamped_time() -> None:
    """A RUN that created an entry in /opt (its mtime moved) is not given the time below."""
    copy, _ = build(0)[0]
    run = layer([
        Item("opt/", tarfile.DIRTYPE, mode=0o755, mtime=REAL_TIME + 5),
        Item("opt/new", data=b"new\n", mtime=REAL_TIME + 5),
    ])  # fmt: skip
    written = normalise([(copy, True), (run, False)])
    assert written[1]["opt"] == EPOCH  # clamped, as every time after the epoch is
    base_time_kept = normalise([(run, False)])
    assert base_time_kept[0]["opt"] == EPOCH


def test_a_parent_is_dated_by_the_names_the_step_changed_not_by_a_raw_time_one_second_can_hide() -> None:
    """Docker 20.10 against 26, measured: one step touches /opt and leaves nothing in it (dropped), the
    next adds /opt/new; whether the second touch falls in the first one's second decides whether
    /opt's raw time moves. The normalised layers are the same either way: /opt got a name."""
    touched = layer([Item("opt/", tarfile.DIRTYPE, mode=0o755, mtime=REAL_TIME)])  # a file made and removed

    def adds_a_name(raw: int) -> bytes:
        return layer([Item("opt/", tarfile.DIRTYPE, mode=0o755, mtime=raw), Item("opt/new", data=b"x\n", mtime=raw)])

    same_second = normalise([(touched, False), (adds_a_name(REAL_TIME), False)])
    next_second = normalise([(touched, False), (adds_a_name(REAL_TIME + 1), False)])
    assert same_second == next_second
    assert same_second[0] == {}  # nothing kept in the first step
    assert same_second[1]["opt"] == EPOCH


def test_a_parent_whose_names_stay_the_same_keeps_the_time_below_whatever_its_raw_time() -> None:
    base = (Item("opt/app/", tarfile.DIRTYPE, mode=0o755, mtime=BEFORE), Item("opt/app/run.sh", data=b"a\n", mtime=BEFORE))
    rewritten = layer([
        Item("opt/", tarfile.DIRTYPE, mode=0o755, mtime=REAL_TIME + 7),  # raw time moved (a temp file, say)
        Item("opt/app/", tarfile.DIRTYPE, mode=0o755, mtime=REAL_TIME + 7),
        Item("opt/app/run.sh", data=b"b\n", mtime=REAL_TIME + 7),
    ])  # fmt: skip
    written = normalise([(rewritten, False)], base)
    assert written[0] == {"opt": BEFORE, "opt/app": BEFORE, "opt/app/run.sh": EPOCH}


def test_a_file_written_again_with_the_same_bytes_is_left_out_whichever_second_it_fell_in() -> None:
    base = (Item("opt/app/", tarfile.DIRTYPE, mode=0o755, mtime=BEFORE), Item("opt/app/run.sh", data=b"a\n", mtime=BEFORE))

    def rewrites(raw: int, data: bytes) -> bytes:
        return layer([
            Item("opt/", tarfile.DIRTYPE, mode=0o755, mtime=BEFORE),
            Item("opt/app/", tarfile.DIRTYPE, mode=0o755, mtime=BEFORE),
            Item("opt/app/run.sh", data=data, mtime=raw),
        ])  # fmt: skip

    assert normalise([(rewrites(BEFORE, b"a\n"), False)], base) == [{}]
    assert normalise([(rewrites(REAL_TIME, b"a\n"), False)], base) == [{}]
    assert normalise([(rewrites(REAL_TIME, b"b\n"), False)], base) == [{"opt": BEFORE, "opt/app": BEFORE, "opt/app/run.sh": EPOCH}]
