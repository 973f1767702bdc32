"""``imagebuild lock``: resolve every pin, then write pins.toml once.

Check, plan, resolve, write. Options and pins are checked before any
request (checks.py); the pins to ask are chosen (plan.py) and asked
concurrently by ``jobs`` worker threads (the work is network- and
subprocess-bound) of one :class:`~imagebuild.lock.repository.Sources` (the
real ones unless a test gives a fake); only when every source answered is
the new text rendered and written atomically, by one writer at a time
(turns.py). Any failure, Ctrl-C or the overall deadline leaves pins.toml
byte-identical.

pins.toml is parsed once: the caller's PinSet is used as long as the file
still holds the bytes it was parsed from (:class:`LoadedPins`), and the
result carries the pins as written, for the python lock after it.

Ctrl-C and the deadline stop the lock at once: the main thread stops
waiting, kills the git process groups and returns; workers are daemon
threads that notice the cancellation at their next step (one blocked in a
read is abandoned: it holds nothing that must be cleaned up, and never
writes).
"""

from __future__ import annotations

import difflib
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from imagebuild.errors import ConfigError, LockError
from imagebuild.inputs.arch import ArchProfile
from imagebuild.lock.checks import check_numbers, check_pins, target_python_if_any
from imagebuild.lock.plan import (
    asked_for_outdated,
    judge,
    kept,
    missing_fields,
    needs_resolution,
    unasked,
    updates_for,
)
from imagebuild.lock.report import LockResult, Mode, PinChange, short_identity
from imagebuild.lock.repository import OpenSources, Resolved, Sources, SourceSettings
from imagebuild.lock.source_errors import SourceError
from imagebuild.lock.sources import RemoteSources, source_url
from imagebuild.lock.turns import writer_turn
from imagebuild.pins import Pin, PinSet, Refresh, load_pins, render_updates
from imagebuild.util.files import write_atomically
from imagebuild.util.retry import Cancelled, Deadline

Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class LockOptions:
    """What to lock and how; the CLI owns the user-facing defaults of the limits."""

    pins_path: Path
    arch: ArchProfile
    base_pin: str  # the final stage's FROM pin (the stage definition's): its python is the wheels' target
    jobs: int  # sources asked at once
    timeout: float  # seconds to connect, and between the bytes of an answer
    deadline: float  # seconds for the whole lock
    upgrade: bool = False  # re-resolve everything
    upgrade_pins: tuple[str, ...] = ()  # re-resolve just these
    dry_run: bool = False  # write nothing
    check: bool = False  # write nothing; result.stale tells whether pins.toml is stale
    locked: bool = False  # write nothing, ask nothing; result.would_change() says what a lock would write
    outdated: bool = False  # write nothing, hash nothing; ask every moving ref and PyPI pin
    offline: bool = False  # ask no source: only what pins.toml holds (fingerprints still written)

    @property
    def mode(self) -> Mode:
        if self.check:
            return "check"
        if self.dry_run:
            return "dry-run"
        if self.locked:
            return "locked"
        return "outdated" if self.outdated else "write"


@dataclass(frozen=True, kw_only=True)
class LoadedPins:
    """pins.toml as the caller parsed it, with the bytes it read just before that parse.

    The lock uses ``pins`` while the file still holds ``source``; it parses the file
    again only when it changed since (another `imagebuild lock` wrote it while this
    one waited for its turn), so it never writes over what another writer wrote.
    """

    pins: PinSet
    source: bytes


def lock(
    options: LockOptions,
    progress: Progress | None = None,
    verbose: Progress | None = None,
    *,
    loaded: LoadedPins | None = None,
    open_sources: OpenSources = RemoteSources,
) -> LockResult:
    """Resolve every pin of ``options.pins_path``; write it if anything was filled or upgraded.

    ``progress`` gets one line per source as it resolves; ``verbose`` the retries.
    ``loaded`` spares a parse of pins.toml the caller already made; ``open_sources``
    opens what the pins are asked about (a fake, in tests).
    """
    check_numbers(jobs=options.jobs, timeout=options.timeout, deadline=options.deadline)
    path = options.pins_path
    _read_bytes(path)  # a missing or unreadable file is reported as such, before a lock file is made
    run = _Run(options=options, deadline=Deadline.after(options.deadline), open_sources=open_sources)
    say = progress or (lambda _msg: None)
    if options.mode != "write":  # nothing to write: no turn to take
        return _lock(run, loaded, say, verbose)
    waiting = f"waiting for another `imagebuild lock` of {path} to finish"
    with writer_turn(path, wait=run.deadline.remaining(), on_wait=lambda: say(waiting)):
        return _lock(run, loaded, say, verbose)


@dataclass(frozen=True, kw_only=True)
class _Run:
    """One lock's options, deadline and sources."""

    options: LockOptions
    deadline: Deadline
    open_sources: OpenSources


def _lock(run: _Run, loaded: LoadedPins | None, say: Progress, verbose: Progress | None) -> LockResult:
    options = run.options
    path = options.pins_path
    original = _read_bytes(path)
    pinset = loaded.pins if loaded is not None and loaded.source == original else load_pins(path)

    def upgrading(pin: Pin) -> bool:
        return options.upgrade or pin.name in options.upgrade_pins

    check_pins(pinset, options.upgrade_pins)
    wanted = [p for p in pinset if _asked(p, options, upgrading(p))]
    # --locked needs no source: pins.toml alone says which pins a plain lock would write (plan.settled).
    unasked_why = "offline" if options.offline else "--locked needs no source" if options.locked else None
    todo = [] if unasked_why else wanted
    resolved = _resolve_all(todo, pinset, run=run, say=say, verbose=verbose)

    def change(pin: Pin) -> PinChange:
        if (r := resolved.get(pin.name)) is not None:
            return judge(
                pin,
                r.fields,
                upgrade=upgrading(pin),
                detail=r.detail,
                yanked=r.yanked,
                recorded=r.recorded,
                newest=r.newest,
            )
        if unasked_why and pin in wanted:
            return unasked(pin, f"{unasked_why}; {_asked_because(pin)}")
        return kept(pin)

    changes = tuple(change(p) for p in pinset)

    updates = updates_for(changes)
    old_text = original.decode("utf-8")
    new_text = render_updates(path, updates) if updates else old_text
    wrote = False
    if options.mode == "write" and new_text != old_text:
        if _read_bytes(path) != original:
            msg = f"{path} changed on disk while locking; nothing written. Run `imagebuild lock` again"
            raise LockError(msg)
        write_atomically(path, new_text)
        wrote = True
    stale = any(c.pending and not (c.applied and wrote) for c in changes)
    return LockResult(
        path=path,
        changes=changes,
        wrote=wrote,
        stale=stale,
        mode=options.mode,
        offline=options.offline,
        pins=_updated(pinset, updates) if wrote else pinset,
        diff=_diff(path, old_text, new_text),
    )


def _asked(pin: Pin, options: LockOptions, upgrade: bool) -> bool:
    """Whether this run would ask the pin's source (before --offline or --locked says it may not)."""
    if options.outdated:
        return asked_for_outdated(pin)
    return needs_resolution(pin, upgrade=upgrade)


def _asked_because(pin: Pin) -> str:
    """Why a lock asks this pin's source, for the line saying it was not asked."""
    if missing_fields(pin) or pin.edited:
        return "resolved from its source"
    if pin.refresh is Refresh.ALWAYS:
        return f"{pin.tracked} is asked on every lock"
    return "re-hashed on upgrade"


def _updated(pinset: PinSet, updates: Mapping[str, Mapping[str, str | int]]) -> PinSet:
    """The pins with the identity fields just written (as parsing the written file gives them)."""

    def with_fields(pin: Pin) -> Pin:
        fields: dict[str, Any] = {k: None if v == "" else v for k, v in updates.get(pin.name, {}).items()}
        return replace(pin, **fields)

    return PinSet(pinset.path, tuple(with_fields(pin) for pin in pinset))


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        msg = f"{path}: cannot read the pins file ({e.strerror or e})"
        raise ConfigError(msg) from e


def _diff(path: Path, old: str, new: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"{path.name} (recorded)", path.name
    )
    return "".join(lines)


def _resolve_all(
    todo: list[Pin], pinset: PinSet, *, run: _Run, say: Progress, verbose: Progress | None
) -> dict[str, Resolved]:
    """Ask every source at once (bounded); collect every failure into one LockError."""
    if not todo:
        return {}
    options = run.options

    def on_retry(e: Exception, attempt: int, wait: float) -> None:
        if verbose is not None:
            verbose(f"retrying in {wait:.2f}s after attempt {attempt}: {e}")

    settings = SourceSettings(
        arch=options.arch,
        python=target_python_if_any(pinset, options.base_pin),
        timeout=options.timeout,
        deadline=run.deadline,
        registries=frozenset(p.registry for p in todo if p.registry is not None),
        on_retry=on_retry,
    )
    sources = run.open_sources(settings)  # the real ones read docker's credentials here
    jobs = min(options.jobs, len(todo))
    say(
        f"locking {pinset.path}: asking {len(todo)} source(s), {jobs} at once "
        f"(--timeout {options.timeout:g}s, --deadline {options.deadline:g}s)"
    )
    try:
        results, failures = _run_workers(todo, sources, jobs=jobs, deadline=run.deadline, say=say)
    finally:
        sources.close()  # done, failed, deadline or Ctrl-C: nothing may keep running, git least of all
    unanswered = [p for p in todo if p.name not in results and all(f.pin is not p for f in failures)]
    failures += [
        SourceError(
            pin,
            source_url(pin),
            f"no answer before the overall deadline ({options.deadline:g}s)",
            "Raise --deadline if the source is just slow, or check it",
        )
        for pin in unanswered
    ]
    if failures:
        raise LockError(_failure_message(failures, pinset, len(todo)))
    return results


Outcome = Resolved | BaseException


def _run_workers(
    todo: list[Pin], sources: Sources, *, jobs: int, deadline: Deadline, say: Progress
) -> tuple[dict[str, Resolved], list[SourceError]]:
    """Resolve ``todo`` on ``jobs`` daemon threads until done, the deadline, or Ctrl-C."""
    work: queue.SimpleQueue[Pin] = queue.SimpleQueue()
    for pin in todo:
        work.put(pin)
    done: queue.SimpleQueue[tuple[Pin, Outcome]] = queue.SimpleQueue()
    cancel = threading.Event()

    def worker() -> None:
        while not cancel.is_set():
            try:
                pin = work.get_nowait()
            except queue.Empty:
                return
            try:
                outcome: Outcome = sources.resolve(pin)
            except Cancelled:
                return
            except BaseException as e:  # SourceError; anything else is a bug, re-raised below
                outcome = e
            done.put((pin, outcome))

    started = time.monotonic()
    results: dict[str, Resolved] = {}
    failures: list[SourceError] = []
    for i in range(jobs):
        threading.Thread(target=worker, name=f"lock-{i}", daemon=True).start()
    try:
        for _ in todo:
            try:
                pin, outcome = done.get(timeout=deadline.remaining())
            except queue.Empty:
                break  # the deadline passed: whoever has not answered fails
            elapsed = time.monotonic() - started
            if isinstance(outcome, SourceError):
                failures.append(outcome)
                say(f"[{pin.name}] failed after {elapsed:.1f}s: {outcome.cause}")
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                results[pin.name] = outcome
                new = short_identity(str(next(iter(outcome.fields.values()), "")))
                say(f"[{pin.name}] {pin.tracked}: {new} ({elapsed:.1f}s)")
    finally:
        cancel.set()  # workers take no more pins; ``sources.close`` stops the ones still asking
    return results, failures


def _failure_message(failures: list[SourceError], pinset: PinSet, asked: int) -> str:
    """One line for one failure; a line per source when several failed (all are reported at once)."""
    if len(failures) == 1:
        e = failures[0]
        return f"[{e.pin.name}] {e.url}: {e.cause}. {e.hint}; {pinset.path} was left untouched"
    order = {name: i for i, name in enumerate(pinset.names())}
    failures.sort(key=lambda e: order[e.pin.name])
    lines = [f"{len(failures)} of {asked} source(s) could not be resolved; {pinset.path} was left untouched:"]
    lines += [f"  [{e.pin.name}] {e.url}: {e.cause}. {e.hint}" for e in failures]
    return "\n".join(lines)


__all__ = ["LoadedPins", "LockOptions", "lock"]
