"""`imagebuild lock` on the command line: options in, the lock's tables, diff or JSON out."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from imagebuild.cli.output import write_json
from imagebuild.cli.verbs import Verb, Verbs, project_of
from imagebuild.errors import ExitCode
from imagebuild.log import logger

# lock's limits: sources asked at once, seconds to connect or between the
# bytes of an answer, and seconds for the whole lock (a 1 GB wheel at 2 MB/s fits).
LOCK_JOBS = 8
LOCK_TIMEOUT = 30.0
LOCK_DEADLINE = 600.0


def cmd_lock(args: argparse.Namespace) -> int:
    from imagebuild.lock import LockOptions, LockResult, lock
    from imagebuild.lock.python import PythonLockOptions, PythonLockResult, check_python_options, lock_python
    from imagebuild.lock.report import Mode
    from imagebuild.lock.uv import UvResolver

    project = project_of(args)
    inputs = project.load(args.arch)
    pin_names = set(inputs.pins.names())
    only_pins = args.only == "pins"
    mode: Mode = "check" if args.check else "dry-run" if args.dry_run else "write"
    options = LockOptions(
        pins_path=project.pins_path,
        arch=inputs.arch,
        upgrade=args.upgrade,
        # With --only pins every name must be a pin (the pins lock says which are not).
        upgrade_pins=tuple(n for n in args.upgrade_package if n in pin_names or only_pins),
        dry_run=args.dry_run,
        check=args.check,
        jobs=args.jobs,
        timeout=args.timeout,
        deadline=args.deadline,
    )
    python_options = PythonLockOptions(
        lock_path=project.python_lock_path,
        definition=inputs.definition,
        pins=inputs.pins,
        arch=inputs.arch,
        constraints=inputs.constraints,
        upgrade=args.upgrade,
        upgrade_packages=tuple(n for n in args.upgrade_package if n not in pin_names),
        mode=mode,
    )
    if not only_pins:
        check_python_options(python_options)
    results: list[LockResult | PythonLockResult] = []
    if args.only != "python":
        pins_result = lock(options, progress=None if args.quiet else logger.info, verbose=logger.debug)
        results.append(pins_result)
        # The python lock reads the base pin's python and the PyPI pins as they are now on disk.
        if pins_result.wrote:
            python_options = replace(python_options, pins=project.load(args.arch).pins)
    if not only_pins:
        results.append(lock_python(python_options, UvResolver()))
    tables = "\n\n".join(r.format_table() for r in results) + "\n"
    if args.json:
        data: dict[str, object] = {}
        for r in results:
            data.update(r.to_json() if isinstance(r, LockResult) else {"python": r.to_json()})
        write_json(data)
    elif args.dry_run:
        # The result of a dry run is the change itself: the diff of pins.toml (the python
        # lock's changes are listed in its table). The tables explain it, on stderr.
        sys.stdout.writelines(r.diff for r in results if isinstance(r, LockResult))
        if not args.quiet:
            sys.stderr.write(tables)
    else:
        sys.stdout.write(tables)
    stale = [r for r in results if r.stale]
    if args.check and stale:
        names = [str(r.pins_path if isinstance(r, LockResult) else r.lock_path) for r in stale]
        logger.error("%s stale or incomplete; run `imagebuild lock`", " and ".join(names))
        return int(ExitCode.FAILED)
    return 0


def register(verbs: Verbs) -> None:
    p = verbs.add(
        Verb(
            name="lock",
            summary="resolve tags, branches and URLs in pins.toml to immutable identities, "
            "and the stages' python packages into pylock.toml",
            run=cmd_lock,
            examples=(
                "imagebuild lock",
                "imagebuild lock -P vllm --dry-run",
                "imagebuild lock --check --json",
            ),
            exit_codes=(ExitCode.FAILED, ExitCode.LOCK_FAILED),
            json="each pin's old and new identity",
        )
    )
    p.add_argument(
        "-U", "--upgrade", action="store_true", help="re-resolve everything, accepting moved tags and files"
    )
    p.add_argument(
        "-P",
        "--upgrade-package",
        "--upgrade-pin",
        dest="upgrade_package",
        action="append",
        default=[],
        metavar="NAME",
        help="re-resolve this pin or locked python package, accepting a move "
        "(repeatable; --upgrade-pin is an old spelling)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the diff of pins.toml on stdout; write nothing"
    )
    p.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 when pins.toml is stale or incomplete"
    )
    p.add_argument(
        "--only",
        choices=("pins", "python"),
        help="lock only the pins file or only the python lock (pylock.toml beside it)",
    )
    p.add_argument(
        "--jobs", type=int, default=LOCK_JOBS, help=f"sources resolved at once (default {LOCK_JOBS})"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=LOCK_TIMEOUT,
        metavar="SECONDS",
        help=f"per request: to connect, and between the bytes of an answer (default {LOCK_TIMEOUT:g})",
    )
    p.add_argument(
        "--deadline",
        type=float,
        default=LOCK_DEADLINE,
        metavar="SECONDS",
        help=f"for the whole pins lock, downloads included (default {LOCK_DEADLINE:g})",
    )
