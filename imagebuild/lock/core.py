"""``imagebuild lock``: resolve every pin, then write pins.toml once.

Plan, resolve, write: the pins to ask are chosen first (plan.py), asked
concurrently (a thread pool bounded by ``jobs``; the work is network- and
subprocess-bound), and only when every source answered is the new text
rendered and written atomically. Any failure, or Ctrl-C, leaves pins.toml
byte-identical. See plan.py for when a moved tag is rewritten (only on
upgrade) and when files are re-hashed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from imagebuild.arch import ArchProfile
from imagebuild.errors import ConfigError, LockError
from imagebuild.lock.http import Http
from imagebuild.lock.plan import judge, kept, needs_resolution, updates_for
from imagebuild.lock.registry import RegistryClient, load_docker_credentials, parse_image_name
from imagebuild.lock.report import LockResult, Mode
from imagebuild.lock.sources import Resolved, SourceContext, SourceError, resolve_pin
from imagebuild.pins import ImagePin, Pin, PinSet, PypiPin, load_pins, render_updates, write_atomically

Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class LockOptions:
    pins_path: Path
    arch: ArchProfile
    upgrade: bool = False  # re-resolve everything
    upgrade_pins: tuple[str, ...] = ()  # re-resolve just these
    dry_run: bool = False  # write nothing
    check: bool = False  # write nothing; result.stale tells whether pins.toml is stale
    jobs: int = 8  # bounded concurrency
    timeout: float = 30.0


def lock(options: LockOptions, progress: Progress | None = None) -> LockResult:
    """Resolve every pin of ``options.pins_path``; write it if anything was filled or upgraded."""
    say = progress or (lambda _msg: None)
    path = options.pins_path
    if options.jobs < 1:
        msg = f"--jobs must be at least 1, got {options.jobs}"
        raise ConfigError(msg)
    if options.timeout <= 0:
        msg = f"--timeout must be positive, got {options.timeout:g}"
        raise ConfigError(msg)
    original = _read_bytes(path)
    pinset = load_pins(path)
    for name in options.upgrade_pins:
        pinset.get(name)  # unknown name: ConfigError with a suggestion
    for pin in pinset:
        if isinstance(pin, ImagePin):
            try:
                parse_image_name(pin.image)
            except ConfigError as e:
                msg = f"{path} [{pin.name}]: {e}"
                raise ConfigError(msg) from e

    def upgrading(pin: Pin) -> bool:
        return options.upgrade or pin.name in options.upgrade_pins

    todo = [p for p in pinset if needs_resolution(p, upgrade=upgrading(p))]
    resolved = _resolve_all(todo, pinset, options, say)
    changes = tuple(
        judge(p, resolved[p.name].fields, upgrade=upgrading(p), detail=resolved[p.name].detail)
        if p.name in resolved
        else kept(p)
        for p in pinset
    )

    mode: Mode = "check" if options.check else "dry-run" if options.dry_run else "write"
    updates = updates_for(changes)
    wrote = False
    if updates:
        text = render_updates(path, updates)
        if mode == "write" and text.encode("utf-8") != original:
            if _read_bytes(path) != original:
                msg = f"{path} changed on disk while locking; nothing written. Run `imagebuild lock` again"
                raise LockError(msg)
            write_atomically(path, text)
            wrote = True
    stale = any(c.pending and not (c.applied and wrote) for c in changes)
    return LockResult(pins_path=path, changes=changes, wrote=wrote, stale=stale, mode=mode)


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        msg = f"{path}: cannot read the pins file ({e.strerror or e})"
        raise ConfigError(msg) from e


def _target_python(pinset: PinSet) -> str | None:
    for pin in pinset:
        if pin.name == "base" and isinstance(pin, ImagePin):
            return pin.python
    return None


def _resolve_all(todo: list[Pin], pinset: PinSet, options: LockOptions, say: Progress) -> dict[str, Resolved]:
    """Ask every source at once (bounded); collect every failure into one LockError."""
    if not todo:
        return {}
    cancel = threading.Event()
    results: dict[str, Resolved] = {}
    failures: list[SourceError] = []
    with Http(timeout=options.timeout, cancel=cancel) as http:
        ctx = SourceContext(
            http=http,
            registry=RegistryClient(http, load_docker_credentials() if _has_images(todo) else {}),
            arch=options.arch,
            python=_target_python(pinset) if any(isinstance(p, PypiPin) for p in todo) else None,
            timeout=options.timeout,
            cancel=cancel,
        )
        pool = ThreadPoolExecutor(max_workers=min(options.jobs, len(todo)), thread_name_prefix="lock")
        try:
            started = time.monotonic()
            futures: dict[Future[Resolved], Pin] = {}
            for pin in todo:
                say(f"resolving [{pin.name}] {pin.tracked}")
                futures[pool.submit(resolve_pin, pin, ctx)] = pin
            for future in as_completed(futures):
                pin = futures[future]
                try:
                    results[pin.name] = future.result()
                    say(f"resolved [{pin.name}] in {time.monotonic() - started:.1f}s")
                except SourceError as e:
                    failures.append(e)
                    say(f"failed [{pin.name}]: {e.cause}")
        except BaseException:
            # Ctrl-C (or a bug): tell workers to stop at their next chunk or retry.
            cancel.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        else:
            pool.shutdown(wait=True)
    if failures:
        raise LockError(_failure_message(failures, pinset, len(todo)))
    return results


def _has_images(pins: list[Pin]) -> bool:
    return any(isinstance(p, ImagePin) for p in pins)


def _failure_message(failures: list[SourceError], pinset: PinSet, asked: int) -> str:
    order = {name: i for i, name in enumerate(pinset.names())}
    failures.sort(key=lambda e: order[e.pin.name])
    lines = [f"{len(failures)} of {asked} source(s) could not be resolved; {pinset.path} was left untouched:"]
    lines += [f"  [{e.pin.name}] {e.url}: {e.cause}. {e.hint}" for e in failures]
    return "\n".join(lines)


__all__ = ["LockOptions", "lock"]
