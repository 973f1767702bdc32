"""`imagebuild lock` on the command line: options in, the lock's tables, diff or JSON out."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, cast

from imagebuild.cli.output import write_json, write_text
from imagebuild.cli.verbs import Verb, Verbs, project_of
from imagebuild.errors import ExitCode
from imagebuild.log import logger

if TYPE_CHECKING:
    from imagebuild.lock.report import Mode

# lock's limits: sources asked at once, seconds to connect or between the
# bytes of an answer, and seconds for the whole lock (a 1 GB wheel at 2 MB/s fits).
LOCK_JOBS = 8
LOCK_TIMEOUT = 30.0
LOCK_DEADLINE = 600.0


def cmd_lock(args: argparse.Namespace) -> int:
    from imagebuild.lock.run import LockRequest, lock_project

    request = LockRequest(
        arch=args.arch,
        upgrade=args.upgrade,
        upgrade_names=tuple(args.upgrade_package),
        only=args.only,
        mode=_mode(args),
        offline=args.offline,
        jobs=args.jobs,
        timeout=args.timeout,
        deadline=args.deadline,
    )
    result = lock_project(
        project_of(args), request, progress=None if args.quiet else logger.info, verbose=logger.debug
    )
    if args.json:
        write_json(result.to_json())
    elif args.dry_run:
        # The result of a dry run is the change itself: the diff of pins.toml (the python
        # lock's changes are listed in its table). The tables explain it, on stderr.
        write_text(result.diff)
        if not args.quiet:
            sys.stderr.write(result.format_tables())
    else:
        write_text(result.format_tables())
    stale = result.stale_paths
    if args.check and stale:
        logger.error("%s stale or incomplete; run `imagebuild lock`", " and ".join(map(str, stale)))
        return int(ExitCode.FAILED)
    changing = result.would_change() if args.locked else ()
    for line in changing:  # one line per pin or package, naming what to run
        logger.error("--locked: %s", line)
    return int(ExitCode.FAILED) if changing else 0


def _mode(args: argparse.Namespace) -> Mode:
    for mode, on in (("check", args.check), ("dry-run", args.dry_run), ("locked", args.locked)):
        if on:
            return cast("Mode", mode)
    return "outdated" if args.outdated else "write"


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
                "imagebuild lock --locked",
                "imagebuild lock --offline --check",
                "imagebuild lock --outdated",
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
    modes = p.add_mutually_exclusive_group()  # argparse refuses two of them in one line, exit 2
    modes.add_argument(
        "--dry-run", action="store_true", help="print the diff of pins.toml on stdout; write nothing"
    )
    modes.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 when pins.toml is stale or incomplete"
    )
    modes.add_argument(
        "--locked",
        action="store_true",
        help="write nothing; exit 1 when a plain `imagebuild lock` would change pins.toml or pylock.toml "
        "(asks no pin's source; the python lock asks the index unless --offline)",
    )
    modes.add_argument(
        "--outdated",
        action="store_true",
        help="write nothing; a table of the pins and packages whose upstream moved (exit 0 either way)",
    )
    p.add_argument(
        "--offline",
        action="store_true",
        help="ask no source and resolve nothing: check and fingerprint what pins.toml and pylock.toml hold, "
        "and name the pins that cannot be checked",
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
