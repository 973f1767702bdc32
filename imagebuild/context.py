"""The build context: only the files the Dockerfile copies, as a deterministic tar.

Entries are sorted, owned by root, with fixed modes and mtimes, so the same
inputs give the same bytes and the classic builder's COPY cache holds across
machines and checkouts.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import ConfigError
from imagebuild.layout import CHECK_TOOL, CONSTRAINT_FILE, CONTEXT_LAUNCHER, CONTEXT_ROOTFS, PROBE_DIR
from imagebuild.project import Inputs
from imagebuild.render import Dockerfile, label_instruction

PACKAGE = Path(__file__).resolve().parent
IMAGE_FILES = PACKAGE / "image_files"
LAUNCHER = PACKAGE / "launcher"


@dataclass(frozen=True)
class ContextFile:
    path: str  # inside the context
    data: bytes
    mode: int = 0o644


def _rootfs(inputs: Inputs) -> list[ContextFile]:
    """Step 3: the constraint file, the in-image checks and the constraint probe."""
    probe = IMAGE_FILES / "probe"
    return [
        ContextFile(f"{CONTEXT_ROOTFS}{CONSTRAINT_FILE}", inputs.constraints.encode()),
        ContextFile(
            f"{CONTEXT_ROOTFS}{CHECK_TOOL}", (IMAGE_FILES / "imagebuild_check.py").read_bytes(), 0o755
        ),
        *(
            ContextFile(f"{CONTEXT_ROOTFS}{PROBE_DIR}/{p.name}", p.read_bytes())
            for p in sorted(probe.iterdir())
        ),
    ]


def _launcher(_: Inputs) -> list[ContextFile]:
    """Step 18: the serve launcher and its recipes (standard library only)."""
    files = [p for p in sorted(LAUNCHER.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    return [
        ContextFile(
            f"{CONTEXT_LAUNCHER}/{p.relative_to(LAUNCHER).as_posix()}",
            p.read_bytes(),
            0o755 if p.name == "serve.py" else 0o644,
        )
        for p in files
        if p.suffix in (".py", ".toml")
    ]


PROVIDERS: dict[str, Callable[[Inputs], list[ContextFile]]] = {
    CONTEXT_ROOTFS: _rootfs,
    CONTEXT_LAUNCHER: _launcher,
}


def context_files(
    dockerfile: Dockerfile, inputs: Inputs, *, labels: Mapping[str, str] | None = None
) -> list[ContextFile]:
    """The context's files, sorted. ``labels`` become one LABEL line after the rendered Dockerfile
    (build-time facts such as the git revision, so they are not in the committed file)."""
    text = dockerfile.text + (f"{label_instruction(labels)}\n" if labels else "")
    files = [ContextFile("Dockerfile", text.encode())]
    for name in dockerfile.context_dirs:
        if name not in PROVIDERS:
            msg = f"a COPY step reads '{name}/' from the build context, which imagebuild does not provide (known: {', '.join(PROVIDERS)})"
            raise ConfigError(msg)
        files += PROVIDERS[name](inputs)
    return sorted(files, key=lambda f: f.path)


def make_context(files: list[ContextFile], mtime: int = 0) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted(
            {str(Path(f.path).parents[i]) for f in files for i in range(len(Path(f.path).parents) - 1)}
        )
        for d in dirs:
            info = _info(d, mtime, 0o755)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for f in files:
            info = _info(f.path, mtime, f.mode)
            info.size = len(f.data)
            tar.addfile(info, io.BytesIO(f.data))
    return buffer.getvalue()


def _info(name: str, mtime: int, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = mtime, mode, 0, 0, "", ""
    return info
