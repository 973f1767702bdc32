"""Optional layers: which command list a step with ``enabled_by`` runs, from its tunable's value.

A tunable's value comes from stages/image.toml [args], then the arch profile's ``args``, then
``--build-arg``: the last one given wins. Each is checked by its kind where it is given (a layer's
tunable is 0 or 1, MAX_JOBS a number). A layer is decided when the Dockerfile is rendered, so the
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
from imagebuild.inputs.values import LAYER_SWITCH, TUNABLE, TUNABLE_KINDS, Kind, shown

DISABLED = "0"  # leaves an optional layer out (the reference's WITH_NIXL=0)
ENABLED = "1"  # builds it; LAYER_SWITCH admits no other value


def with_tunables(definition: ImageDefinition, values: Mapping[str, str], where: str) -> ImageDefinition:
    """``definition`` with the tunables ``values`` (named in errors as ``where``) as their defaults,
    and each optional layer's commands the ones its tunable's value selects."""
    tunables = dict(definition.spec.args)
    for name in values:
        if name not in tunables:
            msg = f"{where}: {shown(name)} is not a build tunable of {definition.spec.source} [args].{suggest(name, tunables)} Tunables: {', '.join(tunables)}"
            raise ConfigError(msg)
        tunable_kind(definition, name).check(values[name], where, name)
    merged = tunables | dict(values)
    spec = replace(definition.spec, args=tuple(merged.items()))
    return replace(definition, spec=spec, steps=tuple(_selected(s, merged) for s in definition.steps))


def tunable_kind(definition: ImageDefinition, name: str) -> Kind:
    """What a value of the tunable ``name`` may be: 0 or 1 when it turns a layer on, else by its name."""
    if any(step.layer is not None and step.layer.arg == name for step in definition.steps):
        return LAYER_SWITCH
    return TUNABLE_KINDS.get(name, TUNABLE)


def layer_enabled(step: Step, tunables: Mapping[str, str]) -> bool:
    return step.layer is not None and tunables.get(step.layer.arg, DISABLED) == ENABLED


def _selected(step: Step, tunables: Mapping[str, str]) -> Step:
    if step.layer is None:
        return step
    return replace(
        step, commands=step.layer.enabled if layer_enabled(step, tunables) else step.layer.disabled
    )
