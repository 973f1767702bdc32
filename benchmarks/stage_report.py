"""bench_stage_size.py's rows, its table and its fits: one row per engine, size and round, printed as a
Markdown table, then per engine least-squares fits in N with the 10 GB extrapolation and the
normalisation's share of the real image's 19-minute cold build (issue 27's goal: <= 5%)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

BUILD_SECONDS = 19 * 60  # the real image's cold build: the 5% goal is of this


@dataclass(frozen=True, kw_only=True)
class Row:
    engine: str
    size_gb: float
    build: float
    normalize: float
    rewrite: float
    load: float
    read_from: str
    disk_mb: float  # kept by the engine beyond the base: the built layer (the cache) and the normalised one
    spool_mb: float  # the normalisation's temporary disk at its peak
    cpu: float  # CPU seconds of the normalising process (all its threads)
    engine_cpu: float  # the engine's (dockerd's) CPU seconds meanwhile: the load, mostly
    moved_cpu: float  # CPU seconds of export + import, the commands' and the engine's
    saved_cpu: float  # the same of docker save + docker load
    rebuild_normalize: float  # the normalisation after a rebuild that changed only the last step
    reused: int  # layers that normalisation took from the engine
    load_start: float
    load_end: float
    export: float
    import_: float
    save: float
    docker_load: float
    files: int = 1  # the step's N GB in this many files
    layers: int = 1  # ... written by this many steps
    rebuild_again: float = 0.0  # the same after one more such rebuild (what the first one read, kept)


def fit(xs: list[float], ys: list[float]) -> str:
    """``a + b/GB (R^2 r), 10 GB: s``, or what a single size cannot give."""
    if len(set(xs)) < 2:
        return "(one size: no fit)"
    exact = " (two sizes: the line through them, R^2 1 by construction)" if len(set(xs)) == 2 else ""
    slope, intercept = statistics.linear_regression(xs, ys)
    predicted = [intercept + slope * x for x in xs]
    mean = statistics.fmean(ys)
    total = sum((y - mean) ** 2 for y in ys)
    r2 = 1 - sum((y - p) ** 2 for y, p in zip(ys, predicted, strict=True)) / total if total else 1.0
    return (
        f"{intercept:.2f} s + {slope:.2f} s/GB (R^2 {r2:.3f}){exact}; 10 GB -> {intercept + 10 * slope:.0f} s"
    )


def print_table(rows: list[Row], engines: list[str], *, distribute: bool) -> None:
    print()
    print(
        "| engine | N | load | build of the step | normalisation | of it: rewrite | of it: load | CPU ours + engine "
        "| read from | disk + | spool peak | after a rebuild of the last step | again | export + import | save + load | ratio "
        "| CPU export + import / save + load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ours, theirs = r.export + r.import_, r.save + r.docker_load
        moved = (
            f"{r.export:.1f} + {r.import_:.1f} s | {r.save:.1f} + {r.docker_load:.1f} s | {ours / theirs:.2f}x | "
            f"{r.moved_cpu:.1f} / {r.saved_cpu:.1f} s"
            if distribute
            else "- | - | - | -"
        )
        print(
            f"| {r.engine} | {r.size_gb:g} GB{f' in {r.files} files' if r.files > 1 else ''}{f' in {r.layers} layers' if r.layers > 1 else ''} | {r.load_start:.1f}-{r.load_end:.1f} | {r.build:.1f} s | "
            f"{r.normalize:.1f} s | {r.rewrite:.1f} s | {r.load:.1f} s | {r.cpu:.1f} + {r.engine_cpu:.1f} s | {r.read_from} | "
            f"{r.disk_mb:.0f} MB | {r.spool_mb:.0f} MB | {r.rebuild_normalize:.1f} s ({r.reused} reused) | {r.rebuild_again:.1f} s | {moved} |"
        )
    print()
    for name in engines:
        mine = [r for r in rows if r.engine == name]
        xs = [r.size_gb for r in mine]
        if len(set(xs)) >= 2:
            slope, intercept = statistics.linear_regression(xs, [r.normalize for r in mine])
            share = (intercept + 10 * slope) / BUILD_SECONDS
            print(
                f"{name}: normalisation = {fit(xs, [r.normalize for r in mine])} ({share:.1%} of a 19-minute build)"
            )
        print(f"{name}: of it rewrite = {fit(xs, [r.rewrite for r in mine])}")
        print(f"{name}: of it load = {fit(xs, [r.load for r in mine])}")
        print(f"{name}: normalisation CPU, ours = {fit(xs, [r.cpu for r in mine])}")
        print(
            f"{name}: normalisation CPU, ours + the engine's = {fit(xs, [r.cpu + r.engine_cpu for r in mine])}"
        )
        print(f"{name}: after a rebuild of the last step = {fit(xs, [r.rebuild_normalize for r in mine])}")
        print(f"{name}: after one more = {fit(xs, [r.rebuild_again for r in mine])}")
        if distribute:
            print(f"{name}: export + import = {fit(xs, [r.export + r.import_ for r in mine])}")
            print(f"{name}: save + load = {fit(xs, [r.save + r.docker_load for r in mine])}")
            print(f"{name}: CPU of export + import = {fit(xs, [r.moved_cpu for r in mine])}")
            print(f"{name}: CPU of save + load = {fit(xs, [r.saved_cpu for r in mine])}")
