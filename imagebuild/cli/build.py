"""`imagebuild build` on the command line: options in, the image ID (or the build record as JSON) out."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING

from imagebuild.cli import arguments
from imagebuild.cli.attestations import add_signing_flags, signing_key_of
from imagebuild.cli.output import with_new_names, write_json, write_text
from imagebuild.cli.verbs import Verb, Verbs, project_of
from imagebuild.errors import ConfigError, ExitCode
from imagebuild.inputs.layout import BUILD_DIR, DEFAULT_REPOSITORY
from imagebuild.log import format_duration, logger
from imagebuild.normalize.ahead import DEFAULT_MIN_MB

if TYPE_CHECKING:
    from imagebuild.build.core import BuildRecord


def build_document(record: BuildRecord) -> dict[str, object]:
    """What `build --json` prints: the build record, with the grammar's names added beside the old ones.

    ``seconds`` beside ``total_seconds`` and each step's ``step`` beside ``number`` (the names plan,
    import and verify use); the old keys go in the next release.
    """
    document = with_new_names(record.to_json(), {"total_seconds": "seconds"})
    document["steps"] = [with_new_names(asdict(step), {"number": "step"}) for step in record.steps]
    return document


def cmd_build(args: argparse.Namespace) -> int:
    from imagebuild.build.core import BuildOptions, build_image, prepare_build
    from imagebuild.build.progress import BuildProgress, ProgressMode, make_progress
    from imagebuild.engine.http_api import HttpEngine

    if args.no_normalize and args.normalize_ahead != ():
        msg = "--normalize-ahead with --no-normalize: nothing is normalised; leave one of them out"
        raise ConfigError(msg)
    project = project_of(args)
    inputs = project.load(args.arch)
    signing_key = signing_key_of(args)
    tags: list[str] = args.tag
    options = BuildOptions(
        arch=args.arch,
        tag=tags[0] if tags else None,
        extra_tags=tuple(tags[1:]),
        no_cache=args.no_cache,
        network=args.network,
        build_args=dict(args.build_arg),
        record_path=args.record,
        pull=args.pull,
        iidfile=args.iidfile,
        normalize=not args.no_normalize,
        keep_cache_image=not args.drop_cache_image,
        cache_normalized=args.cache_normalized,
        normalize_ahead_mb=DEFAULT_MIN_MB if args.normalize_ahead == () else args.normalize_ahead,
        signing_key=signing_key,
        compile_cache=args.compile_cache,
    )
    # Bad arguments and inputs are found before the engine is asked; the build takes the result as it is.
    prepared = prepare_build(project, inputs, options)
    progress = (
        BuildProgress.quiet()
        if args.quiet
        else make_progress(ProgressMode(args.progress or "auto"), sys.stderr, verbose=args.verbose > 0)
    )
    with HttpEngine.opened() as engine:  # on a plain local socket, docker-py is imported only if needed
        record = build_image(prepared, engine, progress=progress)
    cached = sum(t.cached for t in record.steps)
    logger.info(
        "built %s (%s) in %s, %d/%d steps cached",
        ", ".join(record.tags),
        record.image_id,
        format_duration(record.total_seconds),
        cached,
        len(record.steps),
    )
    if args.json:
        write_json(build_document(record))
    else:
        write_text(record.image_id + "\n")
    return 0


def register(verbs: Verbs) -> None:
    p = verbs.add(
        Verb(
            name="build",
            summary="render and build the image through the Docker engine; tag it only on success",
            run=cmd_build,
            examples=(
                "imagebuild build",
                "imagebuild build --tag registry.example.com/ml/kimi-k3:gfx942 --tag kimi-k3:latest "
                "--iidfile build/image-id",
                "imagebuild build --pins sampleworld/pins.toml --network host --progress plain",
                "imagebuild build --network host --compile-cache ~/.cache/imagebuild-ccache",
            ),
            exit_codes=(
                ExitCode.NO_ENGINE,
                ExitCode.BUILD_FAILED,
                ExitCode.REGISTRY,
                ExitCode.ATTESTATION,
                ExitCode.NORMALIZE,
            ),
            json="the build record",
            progress=True,
        )
    )
    p.add_argument(
        "-t",
        "--tag",
        action="append",
        default=[],
        type=arguments.image_tag,
        metavar="NAME[:TAG]",
        help=f"name to tag on success, repeatable; the first is the record's (default {DEFAULT_REPOSITORY}:ARCH)",
    )
    p.add_argument("--no-cache", action="store_true", help="build every step again")
    p.add_argument(
        "--pull",
        action="store_true",
        help="pull the base and donor images (by digest) even when the engine has them",
    )
    p.add_argument(
        "--network",
        type=arguments.network_mode,
        help="build network mode, e.g. host (needed for loopback sources)",
    )
    arguments.add_build_arg(p, "override a tunable")
    p.add_argument(
        "--record",
        type=arguments.output_file,
        metavar="FILE",
        help=f"build record JSON (default {BUILD_DIR}/ARCH.build.json)",
    )
    p.add_argument(
        "--no-normalize",
        action="store_true",
        help="skip the timestamp normalisation (the image ID then differs on every cold build)",
    )
    p.add_argument(
        "--drop-cache-image",
        action="store_true",
        help="remove the built image (TAG-cache) once normalised: the engine keeps the build's layers once, "
        "not twice, and the next build starts cold (for a runner that builds once)",
    )
    p.add_argument(
        "--cache-normalized",
        action="store_true",
        help="keep TAG-cache as the built config over the normalised layers, not the built image: the engine "
        "keeps the build's layers once and the next build takes steps from it (graph-driver stores; "
        "elsewhere the built image is kept)",
    )
    p.add_argument(
        "--normalize-ahead",
        type=arguments.normalize_ahead,
        default=(),
        metavar="MB|off",
        help=f"normalise the build's intermediate images while its later steps build, each time its uncached "
        f"steps have added MB of layers (default {DEFAULT_MIN_MB}; 0: after every such step; off: only after "
        "the build; a round waits for an idle core); the image is the same either way (docs/bit-identical.md)",
    )
    p.add_argument(
        "--iidfile",
        type=arguments.output_file,
        metavar="FILE",
        help="write the image ID (sha256:...) to FILE, as docker build does",
    )
    p.add_argument(
        "--compile-cache",
        type=arguments.compile_cache,
        metavar="DIR|URL",
        help="keep steps 4 and 7's ccache objects in DIR (created when missing) or an http(s):// ccache storage, "
        "served on the build host's loopback for the build (needs --network host); the image is the same with "
        "or without it (docs/compile-cache.md)",
    )
    add_signing_flags(p, "the SBOM and provenance")
