"""An arch profile applied to the image definition: what one arch's image is made of.

``apply_profile`` is where a profile's step and donor names meet what they name: the steps it
leaves out (by slug), the donor stage it takes the graft from (or none); ``check_profile_recipes``
the launcher recipes it changes (its pins: imagebuild.pins.arch_pins). A name that does not exist is bad input naming the profile's file
and key. The steps that stay keep their order and are numbered as the build counts them, so a
profile without step 15 renders [15/17] for what was step 16; each keeps its file (and so its
python lock group).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from imagebuild.errors import ConfigError
from imagebuild.inputs.arch import ArchProfile
from imagebuild.inputs.arch_recipe import apply_overlay, check_topology, read_recipe_data
from imagebuild.inputs.layers import with_tunables
from imagebuild.inputs.schema import suggest
from imagebuild.inputs.stage_model import ImageDefinition, Step
from imagebuild.inputs.values import shown


def apply_profile(definition: ImageDefinition, arch: ArchProfile) -> ImageDefinition:
    """``definition`` as ``arch`` builds it: its omitted steps gone, its donor stage's pin set."""
    slugs = [s.slug for s in definition.steps]
    for slug in arch.omit_steps:
        if slug not in slugs:
            msg = f"{arch.where}: omit_steps names step {shown(slug)}, which stages/ does not have.{suggest(slug, slugs)} Steps: {', '.join(slugs)}"
            raise ConfigError(msg)
    if definition.steps and definition.steps[0].slug in arch.omit_steps:
        msg = f"{arch.where}: omit_steps names {shown(definition.steps[0].slug)}, the FROM of the final stage; it cannot be left out"
        raise ConfigError(msg)
    kept = [_with_text(s, arch) for s in definition.steps if s.slug not in arch.omit_steps]
    kept_slugs = [s.slug for s in kept]
    for text in arch.step_text:
        if text.slug not in kept_slugs:
            msg = f"{arch.where}: [step_text.{text.slug}] names a step this profile does not run.{suggest(text.slug, kept_slugs)} Steps: {', '.join(kept_slugs)}"
            raise ConfigError(msg)
    spec = definition.spec
    donor = spec.donor_pin if arch.donor is None else (arch.donor or None)
    for step in kept:
        if step.from_pin and donor is None:
            msg = (f'{arch.where}: donor = "" (no donor stage), but {step.source.name} copies from the donor stage; '
                   f'name a donor pin or add "{step.slug}" to omit_steps')  # fmt: skip
            raise ConfigError(msg)
    steps = tuple(
        replace(_from_donor(step, spec.donor_pin, donor) if step.from_pin else step, number=number)
        for number, step in enumerate(kept, 1)
    )
    profiled = ImageDefinition(spec=replace(spec, donor_pin=donor), steps=steps)
    return with_tunables(profiled, dict(arch.args), f"{arch.where} [args]")


def _with_text(step: Step, arch: ArchProfile) -> Step:
    text = next((t for t in arch.step_text if t.slug == step.slug), None)
    if text is None:
        return step
    return replace(step, title=text.title or step.title, why=text.why or step.why)


def _from_donor(step: Step, written: str | None, donor: str | None) -> Step:
    """A COPY from the donor stage names the donor's values (${DONOR_SITE_PACKAGES}) by the pin
    stages/image.toml gives the stage: on a profile with another donor they are that pin's."""
    src = step.src or ""
    if written and donor and written != donor:
        src = src.replace(f"${{{written.upper()}_", f"${{{donor.upper()}_")
    return replace(step, from_pin=donor, src=src)


def check_profile_recipes(arch: ArchProfile, recipes_dir: Path) -> None:
    """Every recipe the profile changes exists, its overlay applies, and its variants fit the nodes."""
    known = sorted(p.stem for p in recipes_dir.glob("*.toml"))
    for overlay in arch.recipes:
        if overlay.recipe not in known:
            msg = f"{overlay.where}: no launcher recipe {shown(overlay.recipe)} in {recipes_dir}.{suggest(overlay.recipe, known)} Recipes: {', '.join(known) or 'none'}"
            raise ConfigError(msg)
    for name in known:
        path = recipes_dir / f"{name}.toml"
        data = read_recipe_data(path.read_text(encoding="utf-8"), str(path))
        found = arch.recipe_overlay(name)
        merged = apply_overlay(data, found) if found else data
        check_topology(merged, arch.gpus_per_node, found.where if found else f"{path} (on {arch.where})")
