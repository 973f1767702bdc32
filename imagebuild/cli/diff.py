"""`imagebuild diff` on the command line: two images in, their differences out, exit 0 or 1."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from imagebuild.cli import arguments
from imagebuild.cli.output import write_json, write_text
from imagebuild.cli.verbs import Verb, Verbs
from imagebuild.errors import ExitCode

if TYPE_CHECKING:
    from imagebuild.engine.interface import Engine


def cmd_diff(args: argparse.Namespace) -> int:
    from imagebuild.diff.report import diff_json, format_diff
    from imagebuild.diff.sources import check_archive, diff_images

    operands = (args.image_a, args.image_b)
    for operand in operands:
        if Path(operand).is_file():
            check_archive(operand)
    # Two archives need no engine: diff then works where there is none.
    engine: contextlib.AbstractContextManager[Engine | None] = contextlib.nullcontext()
    if not all(Path(operand).is_file() for operand in operands):
        from imagebuild.engine.docker import DockerEngine

        engine = DockerEngine.opened()
    with engine as opened:
        diff = diff_images(args.image_a, args.image_b, mtime=args.mtime, engine=opened)
    if args.json:
        write_json(diff_json(diff))
    else:
        write_text(format_diff(diff) + "\n")
    return int(ExitCode.OK if diff.identical else ExitCode.FAILED)


def register(verbs: Verbs) -> None:
    p = verbs.add(
        Verb(
            name="diff",
            summary="compare two images (in the engine, or docker save / export archives); exit 1 when they differ",
            run=cmd_diff,
            examples=(
                "imagebuild diff imagebuild/kimi-k3:gfx942 registry.example.com/ml/kimi-k3:gfx942",
                "imagebuild diff first.tar imagebuild/kimi-k3:gfx942 --json",
                "imagebuild diff /shared/images/kimi-k3-06203f705c54.tar.zst.json imagebuild/kimi-k3:gfx942",
            ),
            exit_codes=(ExitCode.FAILED, ExitCode.NO_ENGINE),
            json="every difference",
            checkout=False,  # images carry their own config; nothing of the checkout is read
            notes=(
                "Compares the config (env, labels, entrypoint, cmd, workdir, user, platform, history "
                "created_by), the layers position by position and the flattened file tree (type, "
                "permission bits, owner, size, content sha256, link target, device, xattrs). Times only "
                "with --mtime. A file argument is an archive: a docker save tar (plain, gzip, zstd) or "
                "the manifest imagebuild export writes; anything else is an image in the engine."
            ),
        )
    )
    p.add_argument(
        "image_a",
        metavar="IMAGE_A",
        type=arguments.image_or_archive,
        help="image name or ID in the engine, or an archive file",
    )
    p.add_argument(
        "image_b",
        metavar="IMAGE_B",
        type=arguments.image_or_archive,
        help="image name or ID in the engine, or an archive file",
    )
    p.add_argument("--mtime", action="store_true", help="compare mtimes and the config's times too")
