"""The pins of one arch profile's image, and the profile's pin names checked against them."""

from __future__ import annotations

from imagebuild.errors import ConfigError
from imagebuild.inputs.arch import ArchProfile
from imagebuild.inputs.schema import suggest
from imagebuild.inputs.stage_model import ImageDefinition
from imagebuild.inputs.values import shown
from imagebuild.pins.kinds import ImagePin
from imagebuild.pins.pinset import PinSet


def pins_for_arch(pins: PinSet, arch: ArchProfile, known: list[str]) -> PinSet:
    """The pins ``arch``'s image may consume: those without ``arches``, and those naming it.

    ``known``: the profiles there are; a pin naming another would silently belong to no image."""
    for pin in pins:
        for name in pin.arches:
            if name not in known:
                msg = f"{pins.path} [{pin.name}]: arches names {shown(name)}, which is no profile in stages/arch/.{suggest(name, known)} Profiles: {', '.join(known)}"
                raise ConfigError(msg)
    return PinSet(pins.path, tuple(p for p in pins if not p.arches or arch.name in p.arches))


def check_profile_pins(definition: ImageDefinition, pins: PinSet, arch: ArchProfile) -> None:
    """The donor stage's pin and the graft's re-pinned pin exist among ``arch``'s pins."""
    names = pins.names()
    donor = definition.spec.donor_pin
    if donor is not None and not isinstance(_pin(pins, donor), ImagePin):
        key = (
            "donor"
            if arch.donor is not None
            else f"(stages/image.toml [donor_stage] pin, not overridden by {arch.where})"
        )
        images = [p.name for p in pins.images()]
        msg = f"{arch.where}: {key} = {shown(donor)} is not an image pin of {pins.path} for {arch.name}.{suggest(donor, images)} Image pins: {', '.join(images) or 'none'}"
        raise ConfigError(msg)
    repinned = arch.graft.repinned if arch.graft else None
    if repinned is not None and _pin(pins, repinned) is None:
        msg = f"{arch.where}: [graft] repinned = {shown(repinned)} is not a pin of {pins.path} for {arch.name}.{suggest(repinned, names)}"
        raise ConfigError(msg)


def _pin(pins: PinSet, name: str) -> object | None:
    return next((p for p in pins if p.name == name), None)
