"""``imagebuild lock``: resolve every pin, then write pins.toml once.

Check, plan, resolve, write. Options and pins are checked before any
request (checks.py); the pins to ask are chosen (plan.py) and asked
concurrently by ``jobs`` worker threads (the work is network- and
subprocess-bound); only when every source answered is the new text rendered
and written atomically, by one writer at a time (turns.py). Any failure,
Ctrl-C or the overall deadline leaves pins.toml byte-identical.

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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import ConfigError, LockError
from imagebuild.inputs.arch import ArchProfile
from imagebuild.lock.checks import check_numbers, check_pins, target_python
from imagebuild.lock.git import GitOptions, GitProcesses
from imagebuild.lock.http import Http
from imagebuild.lock.plan import judge, kept, needs_resolution, updates_for
from imagebuild.lock.registry import RegistryClient
from imagebuild.lock.registry_auth import Credentials
from imagebuild.lock.report import LockResult, Mode, short_identity
from imagebuild.lock.sources import Resolved, SourceContext, SourceError, resolve_pin, source_url
from imagebuild.lock.turns import writer_turn
from imagebuild.pins import Pin, PinSet, load_pins, render_updates
from imagebuild.util.files import write_atomically
from imagebuild.util.retry import Cancelled, Deadline, RetryPolicy

Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class LockOptions:
    """What to lock and how; the CLI owns the user-facing defaults of the limits."""

    pins_path: Path
    arch: ArchProfile
    jobs: int  # sources asked at once
    timeout: float  # seconds to connect, and between the bytes of an answer
    deadline: float  # seconds for the whole lock
    upgrade: bool = False  # re-resolve everything
    upgrade_pins: tuple[str, ...] = ()  # re-resolve just these
    dry_run: bool = False  # write nothing
    check: bool = False  # write nothing; result.stale tells whether pins.toml is stale

    @property
    def mode(self) -> Mode:
        return "check" if self.check else "dry-run" if self.dry_run else "write"


def lock(
    options: LockOptions, progress: Progress | None = None, verbose: Progress | None = None
) -> LockResult:
    """Resolve every pin of ``options.pins_path``; write it if anything was filled or upgraded.

    ``progress`` gets one line per source as it resolves; ``verbose`` the retries.
    """
    check_numbers(jobs=options.jobs, timeout=options.timeout, deadline=options.deadline)
    path = options.pins_path
    _read_bytes(path)  # a missing or unreadable file is reported as such, before a lock file is made
    deadline = Deadline.after(options.deadline)
    say = progress or (lambda _msg: None)
    if options.mode != "write":
        return _lock(options, deadline, say, verbose)
    waiting = f"waiting for another `imagebuild lock` of {path} to finish"
    with writer_turn(path, wait=deadline.remaining(), on_wait=lambda: say(waiting)):
        return _lock(options, deadline, say, verbose)


def _lock(options: LockOptions, deadline: Deadline, say: Progress, verbose: Progress | None) -> LockResult:
    path = options.pins_path
    original = _read_bytes(path)
    pinset = load_pins(path)

    def upgrading(pin: Pin) -> bool:
        return options.upgrade or pin.name in options.upgrade_pins

    todo = [p for p in pinset if needs_resolution(p, upgrade=upgrading(p))]
    check_pins(pinset, options.upgrade_pins)
    credentials = _credentials(todo)
    resolved = _resolve_all(
        todo, pinset, options=options, deadline=deadline, credentials=credentials, say=say, verbose=verbose
    )
    changes = tuple(
        judge(p, r.fields, upgrade=upgrading(p), detail=r.detail, yanked=r.yanked)
        if (r := resolved.get(p.name))
        else kept(p)
        for p in pinset
    )

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
        pins_path=path,
        changes=changes,
        wrote=wrote,
        stale=stale,
        mode=options.mode,
        diff=_diff(path, old_text, new_text),
    )


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


def _credentials(todo: list[Pin]) -> dict[str, Credentials]:
    """docker's credentials for each registry the lock will ask; read before any request."""
    registries = {p.registry for p in todo if p.registry is not None}
    if not registries:
        return {}
    from imagebuild.engine.credentials import registry_credentials  # docker-py loads only when needed

    found = {registry: registry_credentials(registry) for registry in sorted(registries)}
    return {registry: creds for registry, creds in found.items() if creds is not None}


def _resolve_all(
    todo: list[Pin],
    pinset: PinSet,
    *,
    options: LockOptions,
    deadline: Deadline,
    credentials: dict[str, Credentials],
    say: Progress,
    verbose: Progress | None,
) -> dict[str, Resolved]:
    """Ask every source at once (bounded); collect every failure into one LockError."""
    if not todo:
        return {}
    cancel = threading.Event()
    processes = GitProcesses()

    def on_retry(e: Exception, attempt: int, wait: float) -> None:
        if verbose is not None:
            verbose(f"retrying in {wait:.2f}s after attempt {attempt}: {e}")

    jobs = min(options.jobs, len(todo))
    say(
        f"locking {pinset.path}: asking {len(todo)} source(s), {jobs} at once "
        f"(--timeout {options.timeout:g}s, --deadline {options.deadline:g}s)"
    )
    with Http(timeout=options.timeout, deadline=deadline, cancel=cancel, on_retry=on_retry) as http:
        ctx = SourceContext(
            http=http,
            registry=RegistryClient(http, credentials),
            git=GitOptions(
                timeout=options.timeout,
                deadline=deadline,
                policy=RetryPolicy(),
                cancel=cancel,
                processes=processes,
                on_retry=on_retry,
            ),
            arch=options.arch,
            python=target_python(pinset),
        )
        results, failures = _run_workers(
            todo, ctx, jobs=jobs, deadline=deadline, cancel=cancel, processes=processes, say=say
        )
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
    todo: list[Pin],
    ctx: SourceContext,
    *,
    jobs: int,
    deadline: Deadline,
    cancel: threading.Event,
    processes: GitProcesses,
    say: Progress,
) -> tuple[dict[str, Resolved], list[SourceError]]:
    """Resolve ``todo`` on ``jobs`` daemon threads until done, the deadline, or Ctrl-C."""
    work: queue.SimpleQueue[Pin] = queue.SimpleQueue()
    for pin in todo:
        work.put(pin)
    done: queue.SimpleQueue[tuple[Pin, Outcome]] = queue.SimpleQueue()

    def worker() -> None:
        while not cancel.is_set():
            try:
                pin = work.get_nowait()
            except queue.Empty:
                return
            try:
                outcome: Outcome = resolve_pin(pin, ctx)
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
        # Done, failed, deadline or Ctrl-C: nothing may keep running, git least of all.
        cancel.set()
        processes.kill_all()
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


__all__ = ["LockOptions", "lock"]
