"""Optional layers: which command list a step with ``enabled_by`` runs, from its tunable's value.

A tunable's value comes from stages/image.toml [args], then the arch profile's ``args``, then
``--build-arg``: the last one given wins. It is decided when the Dockerfile is rendered, so the
Dockerfile of a build holds only the commands that build runs (and its pins only the pins it
consumes): a WITH_NIXL=0 image neither fetches nor needs the NIXL sources, and a WITH_NIXL=1
render refuses an unlocked NIXL pin before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from imagebuild.errors import ConfigError
from imagebuild.inputs.schema import suggest
from imagebuild.inputs.stage_model import ImageDefinition, Step
from imagebuild.inputs.values import shown

DISABLED = "0"  # the one value that leaves an optional layer out (the reference's WITH_NIXL=0)


def with_tunables(definition: ImageDefinition, values: Mapping[str, str], where: str) -> ImageDefinition:
    """``definition`` with the tunables ``values`` (named in errors as ``where``) as their defaults,
    and each optional layer's commands the ones its tunable's value selects."""
    tunables = dict(definition.spec.args)
    for name in values:
        if name not in tunables:
            msg = f"{where}: {shown(name)} is not a build tunable of {definition.spec.source} [args].{suggest(name, tunables)} Tunables: {', '.join(tunables)}"
            raise ConfigError(msg)
    merged = tunables | dict(values)
    spec = replace(definition.spec, args=tuple(merged.items()))
    return replace(definition, spec=spec, steps=tuple(_selected(s, merged) for s in definition.steps))


def layer_enabled(step: Step, tunables: Mapping[str, str]) -> bool:
    return step.layer is not None and tunables.get(step.layer.arg, DISABLED) != DISABLED


def _selected(step: Step, tunables: Mapping[str, str]) -> Step:
    if step.layer is None:
        return step
    return replace(
        step, commands=step.layer.enabled if layer_enabled(step, tunables) else step.layer.disabled
    )
