"""Arch profiles: the per-GPU-architecture values of a build (stages/arch/NAME.toml).

Adding an arch is adding a file. A profile says where the hardware makes the image differ:
the compile targets (ARGs whose names never collide with an ENV the base image sets: the
base's ENV PYTORCH_ROCM_ARCH shadows an ARG of that name, which once compiled vLLM for
gfx90a;gfx942;gfx950 instead of gfx942), the donor image of the graft (or none), the steps
of stages/ it leaves out, what the graft must hold, the GPUs of one node, and how the
launcher recipes the image carries differ on it (imagebuild.inputs.arch_recipe). What the
names it gives refer to (steps, pins, variants) is checked where those are loaded
(imagebuild.inputs.profile), always naming this file and key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import ConfigError
from imagebuild.inputs.arch_recipe import RecipeOverlay, parse_overlays
from imagebuild.inputs.schema import Table, read_toml, suggest
from imagebuild.inputs.values import ENV_NAME, PIN_NAME, TUNABLE, shown

PLATFORM_RE = re.compile(r"^linux/(amd64|arm64)$")
SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
FILE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_KEYS = (
    "description",
    "platform",
    "gfx_arch",
    "rocm_arch",
    "mori_gpu_archs",
    "nic_arch",
    "gpus_per_node",
    "donor",
    "omit_steps",
    "args",
    "graft",
    "recipes",
    "step_text",
)
_GRAFT_KEYS = ("tuned_configs", "repinned")
NO_DONOR = ""  # donor = "": the profile's image has no donor stage


@dataclass(frozen=True, kw_only=True)
class GraftProfile:
    """What the graft (the donor's AITER trees) must hold on this arch, for verify."""

    tuned_configs: tuple[str, ...]  # file names of the K3-tuned MoE configs under aiter/ or aiter_meta/
    repinned: (
        str | None
    )  # the pin installed over the grafted tree and checked against its RECORD; None: the donor's is kept


@dataclass(frozen=True, kw_only=True)
class StepText:
    """A step's comment text on this arch, where the file's would be wrong (a step it names is omitted)."""

    slug: str
    title: str | None
    why: str | None


@dataclass(frozen=True, kw_only=True)
class ArchProfile:
    name: str
    description: str
    platform: str  # OCI platform of the images, e.g. linux/amd64
    gfx_arch: str  # GFX_COMPILATION_ARCH
    rocm_arch: str  # becomes PYTORCH_ROCM_ARCH for source builds
    mori_gpu_archs: str
    nic_arch: str
    source: Path | None = None  # the profile file, named in errors
    gpus_per_node: int = 8
    donor: str | None = (
        None  # the donor stage's image pin; None: stages/image.toml's; NO_DONOR: no donor stage
    )
    omit_steps: tuple[str, ...] = ()  # slugs of stages/NN-slug.toml steps this profile leaves out
    # Tunables of stages/image.toml this profile builds with by default (WITH_NIXL = "1");
    # --build-arg still overrides them.
    args: tuple[tuple[str, str], ...] = ()
    graft: GraftProfile | None = None  # None: verify's defaults for the graft
    recipes: tuple[RecipeOverlay, ...] = ()  # how the launcher recipes differ on this arch
    step_text: tuple[StepText, ...] = ()  # a step's title or why as this arch's Dockerfile says it

    @property
    def where(self) -> str:
        return str(self.source) if self.source else f"arch profile {self.name}"

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

    def recipe_overlay(self, recipe: str) -> RecipeOverlay | None:
        return next((o for o in self.recipes if o.recipe == recipe), None)


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
    gpus = t.integer("gpus_per_node", default=8)
    if not 1 <= gpus <= 64:
        msg = f"{path}: gpus_per_node = {gpus} must be between 1 and 64"
        raise ConfigError(msg)
    return ArchProfile(
        name=name,
        source=path,
        description=t.string("description"),
        platform=platform,
        # ARG values of the build, like the tunables.
        gfx_arch=t.string("gfx_arch", kind=TUNABLE),
        rocm_arch=t.string("rocm_arch", kind=TUNABLE),
        mori_gpu_archs=t.string("mori_gpu_archs", kind=TUNABLE),
        nic_arch=t.string("nic_arch", kind=TUNABLE),
        gpus_per_node=gpus,
        donor=_donor(t),
        omit_steps=_omit_steps(t),
        args=tuple(t.string_map("args", names=ENV_NAME, values=TUNABLE).items()) if "args" in t.data else (),
        graft=_graft(t),
        recipes=parse_overlays(t.data.get("recipes"), str(path)),
        step_text=_step_text(t),
    )


def _step_text(t: Table) -> tuple[StepText, ...]:
    if "step_text" not in t.data:
        return ()
    table = t.table("step_text")
    found = []
    for slug in table.data:
        if not SLUG_RE.fullmatch(slug):
            msg = f"{table.where}: {shown(slug)} is not a step slug (the 'mori' of stages/04-mori.toml)"
            raise ConfigError(msg)
        entry = table.table(slug)
        entry.check_keys(("title", "why"))
        why = entry.paragraph("why") if "why" in entry.data else None
        found.append(StepText(slug=slug, title=entry.optional_string("title"), why=why))
    return tuple(found)


def _donor(t: Table) -> str | None:
    if "donor" not in t.data:
        return None
    text = t.string("donor", default=NO_DONOR)
    return text if text == NO_DONOR else t.string("donor", kind=PIN_NAME)


def _omit_steps(t: Table) -> tuple[str, ...]:
    slugs = t.strings("omit_steps")
    for slug in slugs:
        if not SLUG_RE.fullmatch(slug):
            msg = f"{t.where}: omit_steps entry {shown(slug)} is not a step slug (the 'mori' of stages/04-mori.toml)"
            raise ConfigError(msg)
    if len(set(slugs)) != len(slugs):
        msg = f"{t.where}: omit_steps names a step twice; name each once"
        raise ConfigError(msg)
    return tuple(slugs)


def _graft(t: Table) -> GraftProfile | None:
    if "graft" not in t.data:
        return None
    g = t.table("graft")
    g.check_keys(_GRAFT_KEYS)
    configs = tuple(g.strings("tuned_configs"))
    for name in configs:
        if not FILE_NAME_RE.fullmatch(name):
            msg = f"{g.where}: tuned_configs entry {shown(name)} must be a file name (no path)"
            raise ConfigError(msg)
    repinned = g.string("repinned", default="")
    return GraftProfile(
        tuned_configs=configs, repinned=g.string("repinned", kind=PIN_NAME) if repinned else None
    )
