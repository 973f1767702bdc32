"""The build context: the Dockerfile and every file it COPYs, self-contained.

``imagebuild render`` writes it to docker/ARCH/ (committed), so a plain ``docker build
docker/ARCH`` builds the image with nothing else; ``imagebuild build`` sends the very same
files, made by the same function, as a deterministic tar. One context, not two.

The Dockerfile is the rendered one plus a closing label block (imagebuild.render.labels). The
inputs digest, which a label carries, is of the context without that block: a file cannot
contain its own digest. Tar entries are sorted, owned by root, with fixed modes and mtimes,
so the same inputs give the same bytes and the classic builder's COPY cache holds across
machines and checkouts.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import ConfigError
from imagebuild.inputs.arch import ArchProfile
from imagebuild.inputs.arch_recipe import apply_overlay, read_recipe_data, recipe_text
from imagebuild.inputs.layout import (
    BUILD_CONSTRAINT_FILE,
    CHECK_TOOL,
    CHECKOUT_LABEL_ARGS,
    CONSTRAINT_FILE,
    CONTEXT_LAUNCHER,
    CONTEXT_ROOTFS,
    INPUTS_LABEL,
    PROBE_DIR,
    SBOM_LABEL,
    sbom_file_name,
)
from imagebuild.project import Inputs
from imagebuild.render import Dockerfile, build_constraint_text
from imagebuild.render.labels import fixed_labels, label_block

PACKAGE = Path(__file__).resolve().parents[1]  # imagebuild/: the image_files and launcher packages
IMAGE_FILES = PACKAGE / "image_files"
LAUNCHER = PACKAGE / "launcher"
DOCKERFILE = "Dockerfile"
EXECUTABLE = 0o755
REGULAR = 0o644


def inputs_digest(context: bytes) -> str:
    """What the image's inputs-digest label holds: sha256 of the context tar without its label block."""
    return "sha256:" + hashlib.sha256(context).hexdigest()


@dataclass(frozen=True)
class ContextFile:
    path: str  # inside the context
    data: bytes
    mode: int = REGULAR


@dataclass(frozen=True, kw_only=True)
class BuildContext:
    files: tuple[ContextFile, ...]  # sorted by path; the Dockerfile ends with its label block
    inputs_tar: bytes  # the context without the label block: what the inputs digest is of
    labels: dict[str, str]  # the labels the Dockerfile fixes (the checkout's come as build args)

    @property
    def dockerfile(self) -> str:
        return next(f.data for f in self.files if f.path == DOCKERFILE).decode()

    @property
    def inputs_digest(self) -> str:
        return inputs_digest(self.inputs_tar)

    @property
    def recipes(self) -> tuple[str, ...]:
        """The launcher recipes the image carries (step 18), by name: what a job on it may run."""
        prefix = f"{CONTEXT_LAUNCHER}/recipes/"
        carried = (
            Path(f.path).stem for f in self.files if f.path.startswith(prefix) and f.path.endswith(".toml")
        )
        return tuple(sorted(carried))

    def tar(self) -> bytes:
        return make_context(list(self.files))


def _rootfs(inputs: Inputs) -> list[ContextFile]:
    """Step 3: the constraint files, the in-image checks and the constraint probe."""
    probe = IMAGE_FILES / "probe"
    build_constraint = build_constraint_text(inputs.constraints, inputs.python_lock)
    return [
        ContextFile(f"{CONTEXT_ROOTFS}{CONSTRAINT_FILE}", inputs.constraints.encode()),
        ContextFile(f"{CONTEXT_ROOTFS}{BUILD_CONSTRAINT_FILE}", build_constraint.encode()),
        ContextFile(
            f"{CONTEXT_ROOTFS}{CHECK_TOOL}", (IMAGE_FILES / "imagebuild_check.py").read_bytes(), EXECUTABLE
        ),
        *(
            ContextFile(f"{CONTEXT_ROOTFS}{PROBE_DIR}/{p.name}", p.read_bytes())
            for p in sorted(probe.iterdir())
            if p.is_file()
        ),
    ]


def _launcher(inputs: Inputs) -> list[ContextFile]:
    """Step 18: the serve launcher and its recipes (standard library only), each recipe as the
    arch profile changes it (byte for byte the file when the profile does not)."""
    files = [p for p in sorted(LAUNCHER.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    return [
        ContextFile(
            f"{CONTEXT_LAUNCHER}/{p.relative_to(LAUNCHER).as_posix()}",
            _launcher_file(p, inputs),
            EXECUTABLE if p.name == "serve.py" else REGULAR,
        )
        for p in files
        if p.suffix in (".py", ".toml")
    ]


def _launcher_file(path: Path, inputs: Inputs) -> bytes:
    overlay = inputs.arch.recipe_overlay(path.stem) if path.parent.name == "recipes" else None
    if overlay is None or path.suffix != ".toml":
        return path.read_bytes()
    return arch_recipe_text(path, inputs.arch).encode()


def arch_recipe_text(path: Path, arch: ArchProfile) -> str:
    """The recipe file at ``path`` as ``arch``'s image carries it."""
    overlay = arch.recipe_overlay(path.stem)
    text = path.read_text(encoding="utf-8")
    if overlay is None:
        return text
    merged = apply_overlay(read_recipe_data(text, str(path)), overlay)
    return recipe_text(
        merged, source=f"imagebuild/launcher/recipes/{path.name}", profile=f"stages/arch/{arch.name}.toml"
    )


def arch_recipes(arch: ArchProfile) -> dict[str, str]:
    """Recipe file name -> its text in ``arch``'s image (the launcher's recipes, as the profile changes them)."""
    directory = LAUNCHER / "recipes"
    return {p.name: arch_recipe_text(p, arch) for p in sorted(directory.glob("*.toml"))}


PROVIDERS: dict[str, Callable[[Inputs], list[ContextFile]]] = {
    CONTEXT_ROOTFS: _rootfs,
    CONTEXT_LAUNCHER: _launcher,
}


def build_context(dockerfile: Dockerfile, inputs: Inputs) -> BuildContext:
    """The context of ``dockerfile``: every file it COPYs, and the Dockerfile with its label block."""
    for arg in CHECKOUT_LABEL_ARGS.values():
        if arg in inputs.pins.build_args() or arg in dict(inputs.definition.spec.args):
            msg = f"ARG {arg} carries an image label; rename the pin or tunable that declares it too"
            raise ConfigError(msg)
    copied: list[ContextFile] = []
    for name in dockerfile.context_dirs:
        if name not in PROVIDERS:
            msg = f"a COPY step reads '{name}/' from the build context, which imagebuild does not provide (known: {', '.join(PROVIDERS)})"
            raise ConfigError(msg)
        copied += PROVIDERS[name](inputs)
    inputs_tar = make_context([ContextFile(DOCKERFILE, dockerfile.text.encode()), *copied])
    labels = fixed_labels(
        inputs, {SBOM_LABEL: sbom_file_name(inputs.arch.name), INPUTS_LABEL: inputs_digest(inputs_tar)}
    )
    text = dockerfile.text + label_block(labels)
    files = sorted([ContextFile(DOCKERFILE, text.encode()), *copied], key=lambda f: f.path)
    return BuildContext(files=tuple(files), inputs_tar=inputs_tar, labels=labels)


def make_context(files: list[ContextFile], mtime: int = 0) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted(
            {str(Path(f.path).parents[i]) for f in files for i in range(len(Path(f.path).parents) - 1)}
        )
        for d in dirs:
            info = _info(d, mtime, EXECUTABLE)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for f in sorted(files, key=lambda f: f.path):
            info = _info(f.path, mtime, f.mode)
            info.size = len(f.data)
            tar.addfile(info, io.BytesIO(f.data))
    return buffer.getvalue()


def _info(name: str, mtime: int, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = mtime, mode, 0, 0, "", ""
    return info


# The context as a directory (docker/ARCH/) ------------------------------------------------------


def read_context_dir(directory: Path) -> list[ContextFile]:
    """The files under ``directory`` as the context holds them (mode: executable or not)."""
    found = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file() or p.is_symlink()):
        mode = EXECUTABLE if os.access(path, os.X_OK) else REGULAR
        found.append(ContextFile(path.relative_to(directory).as_posix(), path.read_bytes(), mode))
    return found


def context_differences(context: BuildContext, directory: Path) -> list[str]:
    """How ``directory`` differs from ``context``: one line per changed, missing or extra file."""
    if not directory.is_dir():
        return [f"{directory}: missing"]
    on_disk = {f.path: f for f in read_context_dir(directory)}
    wanted = {f.path: f for f in context.files}
    problems = []
    for path in sorted(wanted.keys() | on_disk.keys()):
        want, have = wanted.get(path), on_disk.get(path)
        if have is None:
            problems.append(f"{path}: missing")
        elif want is None:
            problems.append(f"{path}: not part of the context (stale)")
        elif want.data != have.data:
            problems.append(f"{path}: content differs")
        elif want.mode != have.mode:
            problems.append(f"{path}: mode {have.mode:o}, expected {want.mode:o}")
    return problems


def write_context_dir(context: BuildContext, directory: Path) -> None:
    """Make ``directory`` hold exactly the context, or leave it as it was.

    The files are written beside it first and swapped in whole, so a failure half-way leaves
    no half-written context. A directory that holds something other than a build context is
    refused rather than emptied.
    """
    if directory.exists() and any(directory.iterdir()) and not (directory / DOCKERFILE).is_file():
        msg = f"{directory}: not a build context (no {DOCKERFILE}) and not empty; refusing to replace it, choose a new directory"
        raise ConfigError(msg)
    staging = directory.with_name(f".{directory.name}.new-{os.getpid()}")
    old = directory.with_name(f".{directory.name}.old-{os.getpid()}")
    try:
        for f in context.files:
            target = staging / f.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(f.data)
            target.chmod(f.mode)
        if directory.exists():
            directory.rename(old)
        try:
            staging.rename(directory)
        except OSError:
            if old.exists():
                old.rename(directory)
            raise
    except OSError as e:
        msg = f"{directory}: cannot write the build context ({e.strerror or e}); it was left as it was"
        raise ConfigError(msg) from e
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
