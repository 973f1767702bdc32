"""The command-line side of publish, export and import: arguments in, results on stdout.

Registered with ``imagebuild.cli`` like every verb (``register``); each checks its arguments before it
touches the engine, and reports through ``imagebuild.cli.main`` (one line, the error's exit code).
"""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import TYPE_CHECKING

from imagebuild.cli import arguments
from imagebuild.cli.attestations import add_signing_flags, signing_key_of
from imagebuild.cli.output import write_json, write_text
from imagebuild.cli.verbs import Verb, Verbs, project_of, warn_deprecated
from imagebuild.errors import ConfigError, EngineError, ExitCode, ImageBuildError
from imagebuild.inputs.layout import build_record_path, default_tag
from imagebuild.inputs.values import shown
from imagebuild.log import format_duration, logger

if TYPE_CHECKING:
    from imagebuild.distribute.attach import AttachResult


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _default_image(args: argparse.Namespace) -> str:
    return str(args.image or default_tag(args.arch))


def _default_record(args: argparse.Namespace) -> Path | None:
    """The build record publish and export note where the image went: --record, else the project's, if in one."""
    if args.record:
        return Path(args.record)
    try:
        return build_record_path(project_of(args).root, args.arch)
    except ImageBuildError:
        return None


def split_reference(text: str) -> tuple[str, str | None]:
    """NAME[:TAG] as NAME and TAG (None without one): a ':' after the last '/' starts the tag."""
    name, colon, tag = text.rpartition(":")
    if not colon or "/" in tag:
        return text, None
    return name, tag


def publish_target(args: argparse.Namespace) -> tuple[str, str | None]:
    """Where publish pushes: -t HOST[:PORT]/REPO[:TAG] (as build's -t, a full reference), checked.

    The old spelling, --repository REPO [--tag TAG] with a bare tag, still works for one release: its
    values are checked as before, then one deprecation line says the -t to write instead.
    """
    from imagebuild.distribute.publish import check_registry_host, check_repository, check_tag

    references: list[str] = args.tag or []
    if len(references) > 1:
        msg = f"-t/--tag given {len(references)} times: publish pushes one reference; give -t once"
        raise ConfigError(msg)
    if args.repository is not None:
        check_repository(args.repository)
        tag = check_tag(references[0]) if references else None
        new = f"-t {args.repository}" + (f":{tag}" if tag else "")
        old = "--repository" + (" with --tag TAG" if tag else "")
        warn_deprecated(f"publish {old}", new)
        return args.repository, tag
    if not references:
        msg = (
            "publish needs -t HOST[:PORT]/REPO[:TAG], where to push (e.g. -t registry.example.com/ml/kimi-k3)"
        )
        raise ConfigError(msg)
    text = references[0]
    check_registry_host(text, "-t/--tag")
    if "@" in text:
        msg = f"-t/--tag {shown(text)}: give HOST[:PORT]/REPO[:TAG] without a digest; publish prints the digest it pushed"
        raise ConfigError(msg)
    repository, tag = split_reference(text)
    try:
        check_repository(repository)
        if tag is not None:
            check_tag(tag)
    except ConfigError as e:
        why = str(e).partition(": ")[2]  # the check names its own flag; this value came as -t
        msg = f"-t/--tag {shown(text)}: {why}"
        raise ConfigError(msg) from e
    return repository, tag


def cmd_publish(args: argparse.Namespace) -> int:
    from imagebuild.distribute.publish import PublishOptions, check_statement_place, publish_image
    from imagebuild.engine.docker import DockerEngine

    repository, tag = publish_target(args)
    options = PublishOptions(
        image=_default_image(args),
        repository=repository,
        tag=tag,
        record_path=_default_record(args),
        signing_key=signing_key_of(args),
        attach=not args.no_attach,
    )
    check_statement_place(options)
    with DockerEngine.opened() as engine:
        result = publish_image(options, engine, report=logger.info)
    if args.json:
        write_json(
            {
                "reference": result.reference,
                "digest": result.digest,
                "image_id": result.image_id or None,
                "repository": result.repository,
                "tag": result.tag,
                "record": str(result.recorded_in) if result.recorded_in else None,
                "attestations": [str(path) for path in result.attestations],
                "attached": _attached_json(result.attached),
            }
        )
    else:
        write_text(result.reference + "\n")
    return 0


def _attached_json(attached: AttachResult | None) -> dict[str, object] | None:
    if attached is None:
        return None
    return {
        "subject": attached.subject,
        "listed_by": attached.listed_by,
        "index_updated": attached.index_updated,
        "seconds": round(attached.seconds, 3),
        "documents": [
            {
                "path": str(d.path),
                "sha256": d.sha256,
                "size": d.size,
                "artifact_type": d.artifact_type,
                "manifest_digest": d.manifest_digest,
            }
            for d in attached.documents
        ],
    }


def cmd_export(args: argparse.Namespace) -> int:
    from imagebuild.distribute.archive_files import check_output_dir
    from imagebuild.distribute.compression import Compression
    from imagebuild.distribute.export import ExportOptions, export_image
    from imagebuild.distribute.formats import ExportFormat, check_format
    from imagebuild.engine.docker import DockerEngine

    check_format(ExportFormat(args.format), Compression(args.compress))
    signing_key = signing_key_of(args)
    record_path = _default_record(args)
    options = ExportOptions(
        image=_default_image(args),
        output=check_output_dir(args.output),  # made by export_image, once the engine has the image
        compression=Compression(args.compress),
        export_format=ExportFormat(args.format),
        signing_key=signing_key,
        record_path=record_path,
    )
    # A batch job's time limit or scancel sends SIGTERM: remove the temporary archive as Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    with DockerEngine.opened() as engine:
        result = export_image(options, engine, report=logger.info)
    if args.json:
        record = str(result.recorded_in) if result.recorded_in else None
        write_json({"manifest": str(result.manifest_path), "record": record, **result.manifest.to_json()})
    else:
        write_text(f"{result.manifest_path}\n")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from imagebuild.distribute.local_import import archive_problem, check_manifest, import_manifest
    from imagebuild.engine.docker import DockerEngine

    manifest = check_manifest(args.manifest)
    # A node whose engine holds the image needs no archive (docs/distribution.md): a missing or truncated
    # one is only reported once the engine cannot be asked, as the input's fault rather than the engine's.
    missing = archive_problem(manifest, args.manifest)
    try:
        with DockerEngine.opened() as engine:
            result = import_manifest(args.manifest, engine, report=logger.info)
    except EngineError as e:
        if missing is None:
            raise
        msg = f"{missing}; nor could the engine be asked whether it holds the image already: {e}"
        raise type(missing)(msg) from e
    how = (
        "already present"
        if result.already_present
        else f"verified and loaded in {format_duration(result.seconds)}"
    )
    named = "" if result.engine_id == result.image_id else f" (engine ID {result.engine_id})"
    logger.info("%s%s %s; tagged %s", result.image_id, named, how, ", ".join(result.tags) or "nothing")
    if args.json:
        write_json(
            {
                "image_id": result.image_id,
                "engine_id": result.engine_id,
                "tags": list(result.tags),
                "already_present": result.already_present,
                "seconds": round(result.seconds, 3),
            }
        )
    else:
        write_text(result.engine_id + "\n")  # what `docker run` takes on this engine
    return 0


def register(verbs: Verbs) -> None:
    p = verbs.add(
        Verb(
            name="publish",
            summary="push the image; print the reference nodes pull by digest",
            run=cmd_publish,
            examples=(
                "imagebuild publish -t registry.example.com/ml/kimi-k3",
                "imagebuild publish kimi-k3:gfx942 -t 127.0.0.1:5000/kimi-k3:v1 --json",
            ),
            exit_codes=(ExitCode.NO_ENGINE, ExitCode.REGISTRY),
            json="reference, digest, image ID, repository and tag; the attestations attached",
            notes=(
                "Then the SBOM, provenance (and their DSSE envelopes when signed) that the build record "
                "of this image names, and the publish statement, are pushed as OCI artifacts whose subject "
                "is the pushed manifest: listed by the registry's referrers API, or by the index tagged "
                "sha256-<hex> where the registry has none. A registry that refuses them: exit 8, the "
                "image stays pushed and tagged. `imagebuild attestations REF` lists and downloads them."
            ),
        )
    )
    p.add_argument(
        "image", nargs="?", type=arguments.image, help="image to push (default imagebuild/kimi-k3:ARCH)"
    )
    p.add_argument(
        "-t",
        "--tag",
        action="append",
        metavar="HOST[:PORT]/REPO[:TAG]",
        help="where to push, registry first, as build's -t names an image; the tag defaults to "
        "ARCH-<image id, 12 hex>",
    )
    p.add_argument(
        "--repository",
        metavar="HOST[:PORT]/REPO",
        help="deprecated: -t HOST[:PORT]/REPO[:TAG] (with --repository, --tag takes the bare TAG, as before)",
    )
    p.add_argument(
        "--record",
        type=arguments.output_file,
        metavar="FILE",
        help="build record to note the reference in (default build/ARCH.build.json)",
    )
    add_signing_flags(p, "the publish statement")
    p.add_argument(
        "--no-attach",
        action="store_true",
        help="push the image only: do not push its attestations as artifacts referring to it",
    )

    p = verbs.add(
        Verb(
            name="export",
            summary="write the image as a verified archive, a manifest and the importer",
            run=cmd_export,
            examples=(
                "imagebuild export -o /shared/images",
                "imagebuild export kimi-k3:gfx942 -o /shared/images --compress gzip",
                "imagebuild export -o /shared/images --format squashfs",
            ),
            exit_codes=(ExitCode.NO_ENGINE,),
            json="the manifest",
        )
    )
    p.add_argument(
        "image", nargs="?", type=arguments.image, help="image to export (default imagebuild/kimi-k3:ARCH)"
    )
    p.add_argument(
        "-o",
        "--output",
        type=arguments.output_directory,
        required=True,
        metavar="DIR",
        help="directory to write the archive, its manifest and the importer into (e.g. shared storage)",
    )
    p.add_argument(
        "--compress",
        choices=("zstd", "gzip", "none"),
        default="zstd",
        help="archive compression (default zstd); with --format squashfs, its blocks' (zstd or gzip)",
    )
    p.add_argument(
        "--format",
        choices=("docker", "oci", "squashfs"),
        default="docker",
        help="docker: the archive docker and podman load (default); oci: an OCI image layout archive "
        "(podman, skopeo; docker load reads it too); squashfs: the flattened root filesystem for "
        "enroot/pyxis and Charliecloud, with enroot's /etc/rc and /etc/environment",
    )
    add_signing_flags(p, "the export statement")
    p.add_argument(
        "--record",
        type=arguments.output_file,
        metavar="FILE",
        help="build record to note the manifest in (default build/ARCH.build.json)",
    )

    p = verbs.add(
        Verb(
            name="import",
            summary="verify an exported archive against its manifest, load and tag it",
            run=cmd_import,
            examples=("imagebuild import /shared/images/kimi-k3-06203f705c54.tar.zst.json",),
            exit_codes=(ExitCode.FAILED, ExitCode.NO_ENGINE, ExitCode.INTEGRITY),
            json="the image ID, its tags and whether it was already present",
        )
    )
    p.add_argument("manifest", type=arguments.input_file, help="the .json manifest export wrote next to the archive")
