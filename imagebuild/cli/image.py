"""The verbs that read the image's definition: render, plan and verify."""

from __future__ import annotations

import argparse
import difflib
import json
import sys

from imagebuild.cli import arguments
from imagebuild.cli.verbs import Verb, Verbs, project_of
from imagebuild.errors import ExitCode, UnpinnedError
from imagebuild.layout import DEFAULT_REPOSITORY, SECRET_SCAN_ROOTS, default_tag
from imagebuild.log import logger
from imagebuild.project import Inputs
from imagebuild.render import Dockerfile, RenderOptions, render


def render_inputs(
    inputs: Inputs, *, allow_unpinned: bool, build_args: dict[str, str] | None = None
) -> Dockerfile:
    options = RenderOptions(allow_unpinned=allow_unpinned, build_args=build_args or {})
    return render(inputs.definition, inputs.pins, inputs.arch, inputs.constraints, options)


def cmd_render(args: argparse.Namespace) -> int:
    project = project_of(args)
    inputs = project.load(args.arch)
    if not args.check:
        try:
            dockerfile = render_inputs(inputs, allow_unpinned=args.allow_unpinned)
        except UnpinnedError as e:
            # The first command a new user tries, on pins whose sources are out of reach here.
            msg = f"{e}, or see the Dockerfile with them marked unpinned: imagebuild render --allow-unpinned"
            raise UnpinnedError(msg) from e
        sys.stdout.write(dockerfile.text)
        return 0
    # The committed file is a review artifact: it shows unpinned sources loudly
    # rather than refusing them, so the staleness check renders the same way.
    text = render_inputs(inputs, allow_unpinned=True).text
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
    return int(ExitCode.FAILED)


def cmd_plan(args: argparse.Namespace) -> int:
    from imagebuild.plan import (
        CONSTRAINT_MECHANISM,
        format_plan,
        invalidated_steps,
        package_invalidated_steps,
    )
    from imagebuild.python_lock import read_python_lock

    project = project_of(args)
    inputs = project.load(args.arch)
    dockerfile = render_inputs(inputs, allow_unpinned=True)
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
        data: dict[str, object] = {"arch": dockerfile.arch, "changed": args.changed, "steps": rows}
        if args.explain:
            data["explanation"] = CONSTRAINT_MECHANISM
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if args.changed:
        logger.info("A change of '%s' rebuilds steps %d-%d:", args.changed, steps[0].number, steps[-1].number)
    sys.stdout.write(format_plan(steps) + "\n")
    if args.explain:
        sys.stdout.write("\n" + CONSTRAINT_MECHANISM + "\n")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from imagebuild.docker_engine import DockerEngine
    from imagebuild.verify import VerifyOptions, prepare_verify, verify

    inputs = project_of(args).load(args.arch)
    options = VerifyOptions(
        image=args.image or default_tag(args.arch),
        junit=args.junit,
        secret_scan_roots=tuple(args.scan_roots or SECRET_SCAN_ROOTS),
    )
    prepare_verify(inputs, options)  # bad arguments and inputs are found before the engine is asked
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
    return 0 if result.passed else int(ExitCode.VERIFY_FAILED)


def register(verbs: Verbs) -> None:
    p = verbs.add(
        Verb(
            name="render",
            summary="print the Dockerfile rendered from stages/, pins and constraints/",
            run=cmd_render,
            examples=(
                "imagebuild render > gfx942.Dockerfile",
                "imagebuild render --allow-unpinned --pins sampleworld/pins.toml",
                "imagebuild render --check",
            ),
            exit_codes=(ExitCode.FAILED,),
        )
    )
    p.add_argument(
        "--allow-unpinned",
        action="store_true",
        help="render sources without an immutable identity (loudly marked)",
    )
    p.add_argument(
        "--check", action="store_true", help="exit 1 with a diff when docker/ARCH.Dockerfile is stale"
    )

    p = verbs.add(
        Verb(
            name="plan",
            summary="show the build steps, or which steps a change of a pin or locked package rebuilds",
            run=cmd_plan,
            examples=("imagebuild plan", "imagebuild plan --changed router", "imagebuild plan --explain"),
            json="the steps",
        )
    )
    p.add_argument(
        "--changed",
        metavar="NAME",
        help="list the steps whose layer cache a change of pin or locked python package NAME invalidates",
    )
    p.add_argument(
        "--explain", action="store_true", help="also explain how the build-toolchain constraint is applied"
    )

    p = verbs.add(
        Verb(
            name="verify",
            summary="run the smoke checks against a built image",
            run=cmd_verify,
            examples=(
                f"imagebuild verify {DEFAULT_REPOSITORY}:gfx942 --junit verify.xml",
                "imagebuild -C ~/imagebuild verify --json",
            ),
            exit_codes=(ExitCode.NO_ENGINE, ExitCode.VERIFY_FAILED),
            json="the result of every check",
        )
    )
    p.add_argument(
        "image",
        nargs="?",
        type=arguments.image,
        help=f"image to check (default {DEFAULT_REPOSITORY}:ARCH)",
    )
    p.add_argument("--junit", type=arguments.output_file, metavar="FILE", help="write JUnit XML here")
    p.add_argument(
        "--scan-root",
        dest="scan_roots",
        action="append",
        metavar="PATH",
        help=f"scan the files under PATH in the image for credentials (repeatable; default {' '.join(SECRET_SCAN_ROOTS)})",
    )
