"""Arch profiles: the per-GPU-architecture values of a build (stages/arch/NAME.toml).

Adding an arch is adding a file. The values reach the Dockerfile as ARGs whose
names never collide with an ENV the base image sets (the base's ENV
PYTORCH_ROCM_ARCH shadows an ARG of that name, which once compiled vLLM for
gfx90a;gfx942;gfx950 instead of gfx942).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import ConfigError
from imagebuild.inputs.schema import Table, read_toml, suggest
from imagebuild.inputs.values import TUNABLE, shown

PLATFORM_RE = re.compile(r"^linux/(amd64|arm64)$")
_KEYS = ("description", "platform", "gfx_arch", "rocm_arch", "mori_gpu_archs", "nic_arch")


@dataclass(frozen=True, kw_only=True)
class ArchProfile:
    name: str
    description: str
    platform: str  # OCI platform of the images, e.g. linux/amd64
    gfx_arch: str  # GFX_COMPILATION_ARCH
    rocm_arch: str  # becomes PYTORCH_ROCM_ARCH for source builds
    mori_gpu_archs: str
    nic_arch: str

    @property
    def machine(self) -> str:
        """The wheel-tag machine name of the platform (x86_64, aarch64)."""
        return {"amd64": "x86_64", "arm64": "aarch64"}[self.platform.split("/")[1]]

    @property
    def deb_architecture(self) -> str:
        """dpkg's name of the platform's architecture (amd64, arm64): apt.lock.toml is kept per one."""
        return self.platform.split("/")[1]

    def build_args(self) -> dict[str, str]:
        return {
            "GFX_COMPILATION_ARCH": self.gfx_arch,
            "TARGET_ROCM_ARCH": self.rocm_arch,
            "MORI_ARCHS": self.mori_gpu_archs,
            "NIC_COMPILATION_ARCH": self.nic_arch,
        }


def known_arches(arch_dir: Path) -> list[str]:
    return sorted(p.stem for p in arch_dir.glob("*.toml"))


def load_arch(arch_dir: Path, name: str) -> ArchProfile:
    known = known_arches(arch_dir)
    if name not in known:
        msg = f"unknown arch {shown(name)}.{suggest(name, known)} Known arches: {', '.join(known) or 'none'} (files in {arch_dir})"
        raise ConfigError(msg)
    path = arch_dir / f"{name}.toml"
    t = Table(read_toml(path), str(path))
    t.check_keys(_KEYS)
    platform = t.string("platform")
    if not PLATFORM_RE.fullmatch(platform):
        msg = f"{path}: platform {shown(platform)} must be linux/amd64 or linux/arm64"
        raise ConfigError(msg)
    return ArchProfile(
        name=name,
        description=t.string("description"),
        platform=platform,
        # ARG values of the build, like the tunables.
        gfx_arch=t.string("gfx_arch", kind=TUNABLE),
        rocm_arch=t.string("rocm_arch", kind=TUNABLE),
        mori_gpu_archs=t.string("mori_gpu_archs", kind=TUNABLE),
        nic_arch=t.string("nic_arch", kind=TUNABLE),
    )
