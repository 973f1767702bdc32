"""`imagebuild init`: a new project from a shipped definition, for a team's own image repository."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from imagebuild.cli import arguments
from imagebuild.cli.output import write_json, write_text
from imagebuild.cli.verbs import Verb, Verbs
from imagebuild.errors import ConfigError
from imagebuild.log import logger
from imagebuild.scaffold.ci import ci_system, ci_systems
from imagebuild.scaffold.new_project import (
    DEFAULT_DEFINITION,
    InitOptions,
    NotEmptyError,
    plan_init,
    shipped_definitions,
    write_project,
)

NOTES = """\
A project is a directory holding stages/ (image.toml, the step files, arch/ARCH.toml), constraints/*.txt,
pins.toml and pylock.toml; every other verb finds it in its working directory or above, or with -C DIR.
A directory with files in it (other than .git) is refused unless --force, which overwrites the listed
files and leaves the others. --ci github|gitlab also writes .github/workflows/image.yml or .gitlab-ci.yml
(lock --check, build, verify --junit, publish on the default branch; see docs/ci.md); in a directory that
is a project already, init --ci writes only that file, refusing to replace one unless --force."""


def cmd_init(args: argparse.Namespace) -> int:
    directory: Path = args.directory
    try:
        plan = plan_init(
            InitOptions(directory=directory, definition=args.definition, force=args.force, ci=args.ci)
        )
    except NotEmptyError as e:
        for path in e.overwritten:  # the list the one-line error points at, warnings so -q shows them
            logger.warning("  would overwrite %s", directory / path)
        raise
    write_project(plan)
    replaced = f", {len(plan.overwritten)} of them replaced" if plan.overwritten else ""
    if plan.ci_only:
        logger.info(
            "wrote %s into the project %s%s", plan.files[0].path, directory, replaced and ", replacing it"
        )
    else:
        logger.info(
            "wrote %d files of %s into %s%s; next: `imagebuild -C %s lock`",
            len(plan.files),
            plan.definition,
            directory,
            replaced,
            shlex.quote(str(directory)),
        )
    if args.json:
        write_json(
            {
                "directory": str(directory),
                "definition": plan.definition,
                "files": [f.path for f in plan.files],
                "overwritten": list(plan.overwritten),
                "ci": args.ci,
            }
        )
    else:
        write_text(f"{directory}\n")
    return 0


def register(verbs: Verbs) -> None:
    p = verbs.add(
        Verb(
            name="init",
            summary="write a new project (stages, arch profile, constraints, pins) from a definition imagebuild ships, ready to lock",
            run=cmd_init,
            examples=(
                "imagebuild init my-image",
                f"imagebuild init my-image --from {DEFAULT_DEFINITION}",
                "imagebuild init . --force --json",
                "imagebuild init my-image --ci github",
                "imagebuild -C my-image init --ci gitlab",
            ),
            checkout=False,
            json="the directory, the definition, the files written and the ones overwritten",
            notes=NOTES,
        )
    )
    p.add_argument(
        "directory",
        nargs="?",
        type=arguments.project_directory,
        default=Path(),
        metavar="DIR",
        help="where to write the project, made if missing (default: the working directory)",
    )
    p.add_argument(
        "--from",
        dest="definition",
        choices=shipped_definitions(),
        default=DEFAULT_DEFINITION,
        help="the shipped definition to start from (default %(default)s)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="write into a directory that has files, overwriting the listed ones",
    )
    p.add_argument(
        "--ci",
        type=_ci_argument,
        metavar="|".join(ci_systems()),
        help="also write the CI file of this system; in an existing project, only it",
    )


def _ci_argument(text: str) -> str:
    try:
        return ci_system(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
