"""A build prepared: its arguments checked, its Dockerfile and context made, its input files hashed.

All that can fail before the engine is asked happens here, once: the command line calls
``prepare_build`` before it opens the engine, and ``build_image`` takes the result as it is. The
input files are hashed here too, before the build: a build can take an hour, and a stage file edited
meanwhile must not be named in the provenance with a digest of what was not built.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from imagebuild.build.record import FileDigest
from imagebuild.errors import ConfigError
from imagebuild.inputs.layers import tunable_kind, with_tunables
from imagebuild.inputs.layout import BUILD_LOG_SUFFIX, build_record_path
from imagebuild.inputs.schema import suggest
from imagebuild.inputs.values import ENV_NAME
from imagebuild.normalize.ahead import DEFAULT_MIN_MB
from imagebuild.project import Inputs, Project
from imagebuild.render import ConstraintMode, Dockerfile, RenderOptions, render_inputs
from imagebuild.render.context import BuildContext, build_context
from imagebuild.secrets import secret_reason
from imagebuild.util.files import writable_directory_problem

if TYPE_CHECKING:
    from imagebuild.attest.keys import SigningKey  # cryptography: loaded only when a key is given
    from imagebuild.build.compile_cache import CompileCache


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    arch: str
    tag: str | None = None  # default imagebuild.inputs.layout.default_tag(arch); the record's tag
    extra_tags: tuple[str, ...] = ()  # tagged too, on success
    pull: bool = False  # pull the base and donor images even when the engine has them
    iidfile: Path | None = None  # the image ID (sha256:...) written here, as docker build --iidfile does
    no_cache: bool = False
    network: str | None = None
    build_args: dict[str, str] = field(default_factory=dict)
    record_path: Path | None = None  # default build/<arch>.build.json
    log_path: Path | None = None  # default build/<arch>.build.log
    constraint_mode: ConstraintMode = ConstraintMode.ON
    normalize: bool = True  # clamp timestamps to SOURCE_DATE_EPOCH after the build (imagebuild.normalize)
    # Keep the built image as TAG-cache, the next build's layer cache; False (--drop-cache-image): remove
    # it once normalised, so the engine holds the build's layers once and the next build starts cold.
    keep_cache_image: bool = True
    # --cache-normalized: keep the cache as the built config over the normalised layers instead, where
    # the store allows it (imagebuild.normalize.cache_image): the build's layers once, the next build warm.
    cache_normalized: bool = False
    # --normalize-ahead: normalise the build's intermediate images while later steps build, once this
    # many MB of new layers wait (imagebuild.normalize.ahead); None: only after the build.
    normalize_ahead_mb: int | None = DEFAULT_MIN_MB
    signing_key: SigningKey | None = None  # --sign-key: the SBOM and provenance also as signed DSSE envelopes
    # --compile-cache: served to steps 4 and 7's ccache while the engine builds.
    compile_cache: CompileCache | None = None


@dataclass(frozen=True, kw_only=True)
class PreparedBuild:
    """Everything a build is made from, read and made before the engine is asked; nothing is read again."""

    project: Project
    inputs: Inputs
    options: BuildOptions
    dockerfile: Dockerfile
    context: BuildContext  # the files `imagebuild render` writes to docker/ARCH/, and the fixed labels
    files: tuple[FileDigest, ...]  # every input file by sha256, hashed now (see input_files)


def check_build_args(build_args: dict[str, str], inputs: Inputs) -> None:
    """A build arg overrides a tunable of stages/image.toml, and is no secret (args are in the history)."""
    spec = inputs.definition.spec
    tunables = dict(spec.args)
    for name, value in build_args.items():
        ENV_NAME.check(name, "--build-arg", name)
        reason = secret_reason(name, value)
        if reason:
            msg = f"--build-arg {name}: refused, {reason}; build args are recorded in the image history"
            raise ConfigError(msg)
        if name not in tunables:
            hint = (
                "change the pins file instead"
                if name in inputs.pins.build_args()
                else f"tunables: {', '.join(tunables)}"
            )
            msg = (
                f"--build-arg {name}: not a build tunable of {spec.source}.{suggest(name, tunables)} ({hint})"
            )
            raise ConfigError(msg)
        # A tunable may be expanded unquoted by a stage (make -j${MAX_JOBS}): its kind is narrow.
        tunable_kind(inputs.definition, name).check(value, "--build-arg", name)


def check_build_places(project: Project, inputs: Inputs, options: BuildOptions) -> None:
    """The build's record and log, where the build will write them (build/ARCH.* in the checkout
    unless --record names a file), can be written: said in one line before the engine is asked, not
    found by the engine's build."""
    record = options.record_path or build_record_path(project.root, inputs.arch.name)
    log = options.log_path or record.with_name(f"{inputs.arch.name}{BUILD_LOG_SUFFIX}")
    for directory in dict.fromkeys((record.parent, log.parent)):
        if problem := writable_directory_problem(directory):
            raise ConfigError(_unwritable(problem))
    for path in (record, log):  # as --record and --log are checked: a FIFO would block, a device take the log
        if path.exists() and not path.is_file():
            raise ConfigError(_unwritable(f"{path} is not a regular file (a directory, a device, a FIFO or a socket)"))
    if log.exists() and not os.access(log, os.W_OK):  # the record is replaced, the log written over
        raise ConfigError(_unwritable(f"{log} is not writable"))


def _unwritable(reason: str) -> str:
    return (
        f"cannot write the build record and log ({reason}); make it writable, or give --record FILE "
        "in a directory you can write (the log, SBOM and provenance go beside it)"
    )


def prepare_build(project: Project, inputs: Inputs, options: BuildOptions) -> PreparedBuild:
    """Check the build's arguments, render its Dockerfile and context, hash its input files."""
    check_build_args(options.build_args, inputs)
    check_build_places(project, inputs, options)
    if options.compile_cache is not None and options.network != "host":
        msg = (
            "--compile-cache needs --network host: steps 4 and 7 reach the cache on the build host's "
            f"loopback (given: --network {options.network or 'default'})"
        )
        raise ConfigError(msg)
    if not options.keep_cache_image and not options.normalize:
        msg = "--drop-cache-image with --no-normalize: the built image is then the image; leave one of them out"
        raise ConfigError(msg)
    if options.cache_normalized and not (options.keep_cache_image and options.normalize):
        other = "--no-normalize" if not options.normalize else "--drop-cache-image"
        msg = f"--cache-normalized with {other}: it keeps the cache over the normalised layers; leave one of them out"
        raise ConfigError(msg)
    # A tunable that turns an optional layer on or off (WITH_NIXL) is decided at render time.
    inputs = replace(inputs, definition=with_tunables(inputs.definition, options.build_args, "--build-arg"))
    dockerfile = render_inputs(inputs, RenderOptions(constraint_mode=options.constraint_mode))
    context = build_context(dockerfile, inputs)
    return PreparedBuild(
        project=project,
        inputs=inputs,
        options=options,
        dockerfile=dockerfile,
        context=context,
        files=input_files(project, inputs, context),
    )


def input_files(project: Project, inputs: Inputs, context: BuildContext) -> tuple[FileDigest, ...]:
    """Every file the build is made from, by sha256, named relative to the checkout.

    The checkout's files (pins, python lock, stages, the arch profile, constraints), then the
    rendered Dockerfile and the build context as sent.
    """

    def name(path: Path) -> str:
        return path.relative_to(project.root).as_posix() if path.is_relative_to(project.root) else str(path)

    paths = [project.pins_path]
    if project.python_lock_path.is_file():
        paths.append(project.python_lock_path)
    if project.apt_lock_path.is_file():
        paths.append(project.apt_lock_path)
    paths += sorted(project.stages_dir.glob("*.toml"))
    paths.append(project.arch_dir / f"{inputs.arch.name}.toml")
    paths += sorted(project.constraints_dir.glob("*.txt"))
    files = [FileDigest(name=name(p), sha256=hashlib.sha256(p.read_bytes()).hexdigest()) for p in paths]
    dockerfile = context.dockerfile.encode()
    files.append(FileDigest(name="Dockerfile", sha256=hashlib.sha256(dockerfile).hexdigest()))
    files.append(FileDigest(name="build-context.tar", sha256=hashlib.sha256(context.inputs_tar).hexdigest()))
    return tuple(files)
