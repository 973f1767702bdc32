"""The verbs that read the image's definition: render, plan and verify."""

from __future__ import annotations

import argparse
import difflib
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from imagebuild.cli import arguments
from imagebuild.cli.output import with_new_names, write_json, write_text
from imagebuild.cli.verbs import Verb, Verbs, project_of
from imagebuild.errors import ConfigError, ExitCode, UnpinnedError
from imagebuild.inputs.layout import DEFAULT_REPOSITORY, SECRET_SCAN_ROOTS, default_tag
from imagebuild.log import logger
from imagebuild.project import Inputs, Project
from imagebuild.render import Dockerfile, RenderOptions, render_inputs

if TYPE_CHECKING:
    from imagebuild.verify import VerifyOptions, VerifyResult


def render_checkout(inputs: Inputs, *, allow_unpinned: bool) -> Dockerfile:
    options = RenderOptions(allow_unpinned=allow_unpinned)
    return render_inputs(inputs, options)


def render_target(args: argparse.Namespace, project: Project) -> Path | None:
    """Where render writes: docker/ARCH/ for the checkout's pins, --output DIR, or None for stdout."""
    if args.output == "-":
        return None
    if args.output is not None:
        return Path(args.output)
    if not project.uses_checkout_pins:
        msg = (
            f"--pins {project.pins_path}: {project.context_dir(args.arch).relative_to(project.root)}/ is "
            "rendered from the checkout's pins.toml; pass --output DIR (or --output - for the Dockerfile on stdout)"
        )
        raise ConfigError(msg)
    return project.context_dir(args.arch)


def render_document(
    arch: str,
    files: list[str],
    *,
    context: Path | None = None,
    dockerfile: str | None = None,
    problems: list[str] | None = None,
    diff: str = "",
) -> dict[str, object]:
    """What `render --json` prints: one shape whether it wrote, checked or printed the Dockerfile."""
    return {
        "arch": arch,
        "context": None if context is None else str(context),
        "files": files,
        "dockerfile": dockerfile,
        "check": problems is not None,
        "up_to_date": None if problems is None else not problems,
        "problems": problems or [],
        "diff": diff,
    }


def cmd_render(args: argparse.Namespace) -> int:
    from imagebuild.render.context import build_context, context_differences, write_context_dir

    project = project_of(args)
    target = render_target(args, project)
    if target is None and args.check:
        msg = "--check compares a context directory; drop --output - or name the directory"
        raise ConfigError(msg)
    inputs = project.load(args.arch)
    # The committed context is a review artifact: it shows unpinned sources loudly rather than
    # refusing them, so the staleness check renders the same way.
    try:
        dockerfile = render_checkout(inputs, allow_unpinned=args.allow_unpinned or args.check)
    except UnpinnedError as e:
        # The first command a new user tries, on pins whose sources are out of reach here.
        msg = f"{e}, or see the Dockerfile with them marked unpinned: imagebuild render --allow-unpinned"
        raise UnpinnedError(msg) from e
    context = build_context(dockerfile, inputs)
    files = [f.path for f in context.files]
    if target is None:
        if args.json:  # stdout is the document: the Dockerfile is in it
            write_json(render_document(args.arch, files, dockerfile=context.dockerfile))
        else:
            write_text(context.dockerfile)
        return 0
    shown = target.relative_to(project.root) if target.is_relative_to(project.root) else target
    if not args.check:
        write_context_dir(context, target)
        size = sum(len(f.data) for f in context.files) // 1024
        logger.info(
            "wrote %s/: the Dockerfile and %d files it COPYs (%d KiB)", shown, len(context.files) - 1, size
        )
        if args.json:
            write_json(render_document(args.arch, files, context=shown))
        return 0
    problems = context_differences(context, target)
    if not problems:
        logger.info("%s/ is up to date (%d files)", shown, len(context.files))
        if args.json:
            write_json(render_document(args.arch, files, context=shown, problems=[]))
        return 0
    committed = target / "Dockerfile"
    old = committed.read_text(encoding="utf-8") if committed.is_file() else ""
    new = context.dockerfile
    diff = "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), str(committed), "rendered"
        )
    )
    if args.json:
        write_json(render_document(args.arch, files, context=shown, problems=problems, diff=diff))
    else:
        write_text(diff)
    report_stale(problems, shown, missing=not target.is_dir())
    logger.error("%s/ is stale; regenerate it with: %s", shown, regenerate_command(args, project, inputs, shown))
    return int(ExitCode.FAILED)


def report_stale(problems: list[str], shown: Path, *, missing: bool) -> None:
    """A line per file that differs, named inside the context directory; one line for a directory not there."""
    if missing:  # the one problem names the directory itself
        logger.error("%s/: missing, nothing was rendered there", shown)
        return
    for problem in problems:
        logger.error("%s/%s", shown, problem)


def regenerate_command(args: argparse.Namespace, project: Project, inputs: Inputs, output: Path) -> str:
    """The render that rewrites what --check found stale: the options given, less --check; and
    --allow-unpinned where the pins need it (a plain render would refuse them), not otherwise."""
    words = ["imagebuild"]
    if args.project is not None:
        words += ["-C", str(args.project)]
    words += ["render", "--arch", args.arch]
    if not project.uses_checkout_pins:
        words += ["--pins", str(project.pins_path)]
    if args.output is not None:  # always, with other pins (render_target)
        words += ["--output", str(output)]
    unpinned = args.allow_unpinned
    if not unpinned:
        try:
            render_checkout(inputs, allow_unpinned=False)
        except UnpinnedError:
            unpinned = True
    if unpinned:
        words.append("--allow-unpinned")
    return shlex.join(words)


def cmd_plan(args: argparse.Namespace) -> int:
    from imagebuild.render.plan import CONSTRAINT_MECHANISM, format_plan, invalidated_steps

    inputs = with_build_args(project_of(args).load(args.arch), dict(args.build_arg))
    if args.changed:
        check_layer_pin(inputs, args.changed)
    dockerfile = render_checkout(inputs, allow_unpinned=True)
    steps = invalidated_steps(dockerfile, args.changed) if args.changed else list(dockerfile.steps)
    if args.json:
        rows = [
            {"step": s.number, "instruction": s.instruction.value, "title": s.title, "pins": list(s.pins)}
            for s in steps
        ]
        data: dict[str, object] = {"arch": dockerfile.arch, "changed": args.changed, "steps": rows}
        if args.explain:
            data["explanation"] = CONSTRAINT_MECHANISM
        write_json(data)
        return 0
    if args.changed:
        logger.info("A change of '%s' rebuilds steps %d-%d:", args.changed, steps[0].number, steps[-1].number)
    write_text(format_plan(steps) + "\n")
    if args.explain:
        write_text("\n" + CONSTRAINT_MECHANISM + "\n")
    return 0


def verify_document(result: VerifyResult) -> dict[str, object]:
    """What `verify --json` prints: the result, with ``seconds`` (the grammar's name) beside ``duration_s``.

    For the run and for each check; ``duration_s`` goes in the next release.
    """
    renames = {"duration_s": "seconds"}
    document = with_new_names(result.to_json(), renames)
    document["checks"] = [with_new_names(check.to_json(), renames) for check in result.checks]
    return document


def cmd_verify(args: argparse.Namespace) -> int:
    from imagebuild.engine.docker import DockerEngine
    from imagebuild.verify import VerifyOptions, prepare_verify, verify
    from imagebuild.verify.checks_file import CHECKS_FILE, EMPTY, load_checks

    project = project_of(args)
    inputs = with_build_args(project.load(args.arch), dict(args.build_arg))
    checks_path = args.checks or (project.root / CHECKS_FILE)
    options = VerifyOptions(
        image=args.image or default_tag(args.arch),
        junit=args.junit,
        secret_scan_roots=tuple(args.scan_roots or SECRET_SCAN_ROOTS),
        checks_file=load_checks(checks_path) if checks_path.is_file() else EMPTY,
        keyword=args.keyword,
    )
    if args.list:
        return list_verify_checks(args, inputs, options)
    # Bad arguments and inputs are found before the engine is asked; verify takes the result as it is.
    prepared = prepare_verify(inputs, options)
    with DockerEngine.opened() as engine:
        result = verify(prepared, engine, progress=logger.info)
    if args.json:
        write_json(verify_document(result))
    else:
        write_text(result.format_report() + "\n")
    return 0 if result.passed else int(ExitCode.VERIFY_FAILED)


def with_build_args(inputs: Inputs, build_args: dict[str, str]) -> Inputs:
    """``inputs`` as a build with ``build_args`` made them: a tunable may turn a layer on (WITH_NIXL=1)."""
    from dataclasses import replace

    from imagebuild.build.prepare import check_build_args
    from imagebuild.inputs.layers import with_tunables

    check_build_args(build_args, inputs)
    return replace(inputs, definition=with_tunables(inputs.definition, build_args, "--build-arg"))


def check_layer_pin(inputs: Inputs, name: str) -> None:
    """A pin only a turned-off optional layer consumes (deepep with WITH_NIXL=0) rebuilds nothing: say which arg turns it on."""
    for step in inputs.definition.steps:
        layer = step.layer
        if layer is None or step.commands == layer.enabled:
            continue
        if any(getattr(c, "pin", None) == name for c in layer.enabled):
            msg = f"'{name}' is consumed only by {step.source.name}'s optional layer, off in this build ({layer.arg}=0): nothing rebuilds; pass --build-arg {layer.arg}=1 to plan the build that has it"
            raise ConfigError(msg)


def list_verify_checks(args: argparse.Namespace, inputs: Inputs, options: VerifyOptions) -> int:
    """verify --list: every check that would run (with -k, the selected ones); no image, no engine."""
    from imagebuild.verify.expectations import build_expectations
    from imagebuild.verify.runner import checks_listed
    from imagebuild.verify.selection import format_list, keyword_expression

    for flag, given in (("--junit", args.junit), ("IMAGE", args.image)):
        if given is not None:
            msg = f"verify --list runs no image, so {flag} has no use; drop it, or drop --list to run the checks"
            raise ConfigError(msg)
    if options.keyword is not None:
        keyword_expression(options.keyword)
    expectations = build_expectations(inputs, image="(listed)", secret_scan_roots=options.secret_scan_roots)
    listed = checks_listed(expectations, options.checks_file, options.keyword)
    if args.json:
        write_json({"checks": [c.to_json() for c in listed], "checks_file": options.checks_file.path or None})
    else:
        write_text(format_list(listed) + "\n")
    return 0


def register(verbs: Verbs) -> None:
    p = verbs.add(
        Verb(
            name="render",
            summary="write the build context (the Dockerfile and every file it COPYs) rendered from "
            "stages/, pins, pylock.toml and constraints/",
            run=cmd_render,
            examples=(
                "imagebuild render --allow-unpinned",
                "imagebuild render --pins sampleworld/pins.toml -o /tmp/gfx942 --allow-unpinned",
                "imagebuild render --allow-unpinned -o - > gfx942.Dockerfile",
                "imagebuild render --check --json",
            ),
            exit_codes=(ExitCode.FAILED,),
            json="the context written or checked (with -o -, the Dockerfile)",
        )
    )
    p.add_argument(
        "--allow-unpinned",
        action="store_true",
        help="render sources without an immutable identity (loudly marked)",
    )
    p.add_argument(
        "-o",
        "--output",
        type=arguments.output_dir,
        metavar="DIR|-",
        help="write the context here (default docker/ARCH/, for the checkout's pins only); "
        "- prints just the Dockerfile on stdout",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 listing what differs when the context directory is stale",
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
        type=arguments.name,
        help="list the steps whose layer cache a change of pin or locked python package NAME invalidates",
    )
    p.add_argument(
        "--explain", action="store_true", help="also explain how the build-toolchain constraint is applied"
    )
    arguments.add_build_arg(
        p, "plan the build with this tunable (as build --build-arg): WITH_NIXL=1 has the NIXL layer"
    )

    p = verbs.add(
        Verb(
            name="verify",
            summary="run the smoke checks against a built image",
            run=cmd_verify,
            examples=(
                f"imagebuild verify {DEFAULT_REPOSITORY}:gfx942 --junit verify.xml",
                "imagebuild -C ~/imagebuild verify --json",
                "imagebuild verify --list -k 'config and not label'",
                "imagebuild verify -k custom --checks team-checks.toml",
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
        "--checks",
        type=arguments.checks_file,
        metavar="FILE",
        help="the project's own checks, run with the built-in ones (default checks.toml at the project root, if there)",
    )
    p.add_argument(
        "-k",
        dest="keyword",
        metavar="EXPR",
        help="run only the checks whose names match EXPR, with pytest's -k grammar (e.g. 'config and not label')",
    )
    p.add_argument(
        "--list", action="store_true", help="list the checks (name, kind, source) without running an image"
    )
    arguments.add_build_arg(
        p, "a tunable the image was built with (as build --build-arg): WITH_NIXL=1 expects the NIXL layer"
    )
    p.add_argument(
        "--scan-root",
        dest="scan_roots",
        action="append",
        type=arguments.scan_root,
        metavar="PATH",
        help=f"scan the files under PATH in the image for credentials (repeatable; default {' '.join(SECRET_SCAN_ROOTS)})",
    )
