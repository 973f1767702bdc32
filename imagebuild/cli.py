"""Command line: parse arguments into options, call the core, exit once.

Only ``main`` prints errors or exits; the commands return an exit code and
write data to stdout, progress to stderr (imagebuild.log).
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from imagebuild import __version__
from imagebuild.distribute.commands import add_distribute_commands
from imagebuild.errors import ImageBuildError
from imagebuild.layout import BUILD_DIR, DEFAULT_ARCH, DEFAULT_REPOSITORY, default_tag
from imagebuild.log import format_duration, logger, setup_logging
from imagebuild.project import Inputs, Project, find_project
from imagebuild.render import Dockerfile, RenderOptions, render

# lock's limits: sources asked at once, seconds to connect or between the
# bytes of an answer, and seconds for the whole lock (a 1 GB wheel at 2 MB/s fits).
LOCK_JOBS = 8
LOCK_TIMEOUT = 30.0
LOCK_DEADLINE = 600.0


def _project(args: argparse.Namespace) -> Project:
    return find_project(Path.cwd(), args.pins)


def _render(inputs: Inputs, *, allow_unpinned: bool, build_args: dict[str, str] | None = None) -> Dockerfile:
    options = RenderOptions(allow_unpinned=allow_unpinned, build_args=build_args or {})
    return render(inputs.definition, inputs.pins, inputs.arch, inputs.constraints, options)


def cmd_render(args: argparse.Namespace) -> int:
    project = _project(args)
    inputs = project.load(args.arch)
    if not args.check:
        sys.stdout.write(_render(inputs, allow_unpinned=args.allow_unpinned).text)
        return 0
    # The committed file is a review artifact: it shows unpinned sources loudly
    # rather than refusing them, so the staleness check renders the same way.
    text = _render(inputs, allow_unpinned=True).text
    committed = project.committed_dockerfile(args.arch)
    old = committed.read_text(encoding="utf-8") if committed.exists() else ""
    if old == text:
        logger.info("%s is up to date", committed.relative_to(project.root))
        return 0
    diff = difflib.unified_diff(
        old.splitlines(keepends=True), text.splitlines(keepends=True), str(committed), "rendered"
    )
    sys.stdout.writelines(diff)
    name = committed.relative_to(project.root)
    logger.error(
        "%s is stale; regenerate it with: imagebuild render --arch %s --allow-unpinned > %s",
        name,
        args.arch,
        name,
    )
    return 1


def cmd_plan(args: argparse.Namespace) -> int:
    from imagebuild.plan import (
        CONSTRAINT_MECHANISM,
        format_plan,
        invalidated_steps,
        package_invalidated_steps,
    )
    from imagebuild.python_lock import read_python_lock

    project = _project(args)
    inputs = project.load(args.arch)
    dockerfile = _render(inputs, allow_unpinned=True)
    steps = list(dockerfile.steps)
    if args.changed:
        consumed = {p for line in dockerfile.lines for p in line.pins}
        lock = read_python_lock(project.python_lock_path)
        if args.changed in consumed or lock is None:
            steps = invalidated_steps(dockerfile, args.changed)
        else:
            steps = package_invalidated_steps(dockerfile, inputs.definition, lock, args.changed)
    if args.json:
        rows = [
            {"step": s.number, "instruction": s.instruction.value, "title": s.title, "pins": list(s.pins)}
            for s in steps
        ]
        json.dump({"arch": dockerfile.arch, "changed": args.changed, "steps": rows}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if args.changed:
        logger.info("A change of '%s' rebuilds steps %d-%d:", args.changed, steps[0].number, steps[-1].number)
    sys.stdout.write(format_plan(steps) + "\n")
    if not args.changed:
        sys.stdout.write("\n" + CONSTRAINT_MECHANISM + "\n")
    return 0


def cmd_lock(args: argparse.Namespace) -> int:
    from imagebuild.lock import LockOptions, LockResult, lock
    from imagebuild.lock.python import PythonLockOptions, PythonLockResult, check_python_options, lock_python
    from imagebuild.lock.report import Mode
    from imagebuild.lock.uv import UvResolver

    project = _project(args)
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
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
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
        return 1
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from imagebuild.build import BuildOptions, build_image, check_build_args
    from imagebuild.docker_engine import DockerEngine
    from imagebuild.progress import ProgressMode, make_progress

    project = _project(args)
    inputs = project.load(args.arch)
    options = BuildOptions(
        arch=args.arch,
        tag=args.tag,
        no_cache=args.no_cache,
        network=args.network,
        build_args=dict(args.build_arg),
        record_path=args.record,
    )
    check_build_args(options.build_args)  # before the engine is touched
    progress = make_progress(ProgressMode(args.progress), sys.stderr, verbose=args.verbose > 0)
    engine = DockerEngine.from_env()
    try:
        record = build_image(project, inputs, options, engine, progress=progress)
    finally:
        engine.close()
    cached = sum(t.cached for t in record.steps)
    logger.info(
        "built %s (%s) in %s, %d/%d steps cached",
        record.tag,
        record.image_id,
        format_duration(record.total_seconds),
        cached,
        len(record.steps),
    )
    if args.json:
        json.dump(record.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(record.image_id + "\n")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from imagebuild.docker_engine import DockerEngine
    from imagebuild.errors import VerifyError
    from imagebuild.verify import VerifyOptions, verify

    inputs = _project(args).load(args.arch)
    options = VerifyOptions(image=args.image or default_tag(args.arch), junit=args.junit)
    engine = DockerEngine.from_env()
    try:
        result = verify(inputs, options, engine, progress=logger.info)
    finally:
        engine.close()
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(result.format_report() + "\n")
    return 0 if result.passed else VerifyError.exit_code


def _build_arg(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        msg = f"--build-arg {text!r}: expected NAME=VALUE"
        raise argparse.ArgumentTypeError(msg)
    return name, value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="imagebuild",
        description="Reproducible builds of the Kimi-K3 vLLM serving image for AMD MI300X.",
    )
    parser.add_argument("--version", action="version", version=f"imagebuild {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more output (build step logs)")
    parser.add_argument("--traceback", action="store_true", help="show the traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func: Callable[[argparse.Namespace], int], help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=func)
        p.add_argument(
            "--arch", default=DEFAULT_ARCH, help=f"arch profile in stages/arch/ (default {DEFAULT_ARCH})"
        )
        p.add_argument("--pins", type=Path, help="pins file (default: pins.toml of the checkout)")
        return p

    p = add("render", cmd_render, "print the Dockerfile rendered from stages/, pins and constraints/")
    p.add_argument(
        "--allow-unpinned",
        action="store_true",
        help="render sources without an immutable identity (loudly marked)",
    )
    p.add_argument(
        "--check", action="store_true", help="exit 1 with a diff when docker/ARCH.Dockerfile is stale"
    )

    p = add("plan", cmd_plan, "show the build steps, or which steps a pin change rebuilds")
    p.add_argument(
        "--changed",
        metavar="NAME",
        help="list the steps whose layer cache a change of pin or locked python package NAME invalidates",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = add("lock", cmd_lock, "resolve tags, branches and URLs in pins.toml to immutable identities")
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
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--json", action="store_true", help="machine-readable output, also on failure")

    p = add("build", cmd_build, "render and build the image through the Docker engine")
    p.add_argument("--tag", help=f"image name to tag on success (default {DEFAULT_REPOSITORY}:ARCH)")
    p.add_argument("--no-cache", action="store_true", help="build every step again")
    p.add_argument("--network", help="build network mode, e.g. host (needed for loopback sources)")
    p.add_argument(
        "--build-arg",
        action="append",
        default=[],
        type=_build_arg,
        metavar="NAME=VALUE",
        help="override a tunable",
    )
    p.add_argument("--record", type=Path, help=f"build record JSON (default {BUILD_DIR}/ARCH.build.json)")
    p.add_argument(
        "--progress",
        choices=["auto", "plain", "tty"],
        default="auto",
        help="plain: a line per step start, end and 30 s heartbeat; tty: one live line; "
        "auto (default): tty when stderr is a terminal. Under GitHub Actions steps are collapsible groups",
    )
    p.add_argument("--json", action="store_true", help="print the build record as JSON")

    p = add("verify", cmd_verify, "run the smoke checks against a built image")
    p.add_argument("image", nargs="?", help=f"image to check (default {DEFAULT_REPOSITORY}:ARCH)")
    p.add_argument("--junit", type=Path, help="write JUnit XML here")
    p.add_argument("--json", action="store_true", help="print the result as JSON")

    add_distribute_commands(add)

    from imagebuild.slurm import command as slurm_command

    slurm_command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    setup_logging(args.verbose)
    try:
        code: int = args.func(args)
    except ImageBuildError as e:
        if args.traceback:
            logger.exception("imagebuild: error")
        return _fail(args, str(e), e.exit_code)
    except KeyboardInterrupt:
        return _fail(args, "interrupted", 130)
    return code


def _fail(args: argparse.Namespace, message: str, code: int) -> int:
    """Report an error: one line on stderr, and with --json a JSON document on stdout too."""
    print(f"imagebuild: error: {message}" if code != 130 else f"imagebuild: {message}", file=sys.stderr)
    if getattr(args, "json", False):
        json.dump({"error": message, "exit_code": code}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return code
