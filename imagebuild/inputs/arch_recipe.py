"""How a launcher recipe differs on one arch: a profile's ``[recipes.NAME]`` table.

The recipe file (imagebuild/launcher/recipes/NAME.toml) stays the one definition; a profile
says only what its hardware changes: env values set or removed, serve flags removed, launcher
inputs, and the variants the arch runs (replacing the file's). ``apply_overlay`` gives the
recipe the image of that arch carries, as TOML text the launcher reads (a variant it drops that
the file does not have is bad input, like any other name it gives); a profile without an
overlay carries the file byte for byte. Each variant's topology is checked against the
profile's GPUs per node: TP x PP must fill whole nodes of it.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from imagebuild.errors import ConfigError
from imagebuild.inputs.schema import Table, suggest
from imagebuild.inputs.values import ENV_NAME, shown
from imagebuild.launcher.inputs import LAUNCHER_ONLY, RECIPE_INPUTS

_OVERLAY_KEYS = ("description", "env", "unset_env", "drop_serve_flags", "inputs", "drop_variants", "variants")
VARIANT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_TOPOLOGY = ("NNODES", "GPUS_PER_NODE", "TP_SIZE", "PP_SIZE")


@dataclass(frozen=True, kw_only=True)
class RecipeOverlay:
    recipe: str  # the recipe file's name (kimi-k3)
    where: str  # "stages/arch/gfx950.toml [recipes.kimi-k3]", for messages
    description: str | None
    env: tuple[tuple[str, str], ...]  # set (or replace) in [env]
    unset_env: tuple[str, ...]  # removed from [env]
    drop_serve_flags: tuple[str, ...]  # a flag and the value after it, removed from serve_flags
    inputs: tuple[tuple[str, str], ...]  # set in [inputs]
    drop_variants: tuple[str, ...]  # the file's variants this arch does not run
    variants: tuple[
        tuple[str, tuple[tuple[str, str], ...]], ...
    ]  # added (or replacing the file's of that name)


def parse_overlays(raw: Any, where: str) -> tuple[RecipeOverlay, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        msg = f"{where}: recipes must be tables, [recipes.NAME]"
        raise ConfigError(msg)
    return tuple(_parse_overlay(name, table, f"{where} [recipes.{name}]") for name, table in raw.items())


def _names(t: Table, key: str, allowed: tuple[str, ...] | None = None) -> dict[str, str]:
    values = t.string_map(key, names=ENV_NAME)
    for name in values:
        if allowed is not None and name not in allowed:
            msg = f"{t.where}: {key}.{name} is not an input a recipe may set ({', '.join(allowed)})"
            raise ConfigError(msg)
    return values


def _parse_overlay(name: str, raw: Any, where: str) -> RecipeOverlay:
    if not isinstance(raw, dict):
        msg = f"{where}: must be a table"
        raise ConfigError(msg)
    t = Table(raw, where)
    t.check_keys(_OVERLAY_KEYS)
    env = _names(t, "env")
    for key in env:
        if key in LAUNCHER_ONLY:
            msg = f"{where}: env.{key} is a launcher input: set it in inputs (or a variant)"
            raise ConfigError(msg)
    variants: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    if "variants" in t.data:
        table = t.table("variants")
        for variant in table.data:
            if not VARIANT_RE.fullmatch(variant):
                msg = f"{where}: variant name {shown(variant)} must be lowercase letters, digits, '-' and '_'"
                raise ConfigError(msg)
        variants = tuple(
            (
                variant,
                tuple(_names(Table({"v": v}, f"{where} [variants.{variant}]"), "v", RECIPE_INPUTS).items()),
            )
            for variant, v in table.data.items()
        )
    return RecipeOverlay(
        recipe=name,
        where=where,
        description=t.optional_string("description"),
        env=tuple(env.items()),
        unset_env=tuple(t.strings("unset_env", kind=ENV_NAME)),
        drop_serve_flags=tuple(t.strings("drop_serve_flags")),
        inputs=tuple(_names(t, "inputs", RECIPE_INPUTS).items()),
        drop_variants=tuple(t.strings("drop_variants")),
        variants=variants,
    )


def read_recipe_data(text: str, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        msg = f"{where}: cannot read the recipe ({e})"
        raise ConfigError(msg) from e


def apply_overlay(data: Mapping[str, Any], overlay: RecipeOverlay) -> dict[str, Any]:
    """The recipe ``data`` (as read from its file) with ``overlay`` applied; every name must be in it."""
    env = dict(data.get("env", {}))
    for key in overlay.unset_env:
        if key not in env:
            msg = f"{overlay.where}: unset_env names {shown(key)}, which recipe {overlay.recipe} does not set"
            raise ConfigError(msg)
        del env[key]
    env.update(overlay.env)
    flags = list(data.get("serve_flags", []))
    for flag in overlay.drop_serve_flags:
        if flag not in flags:
            msg = f"{overlay.where}: drop_serve_flags names {shown(flag)}, which recipe {overlay.recipe} does not pass"
            raise ConfigError(msg)
        at = flags.index(flag)
        has_value = at + 1 < len(flags) and not flags[at + 1].startswith("--")
        del flags[at : at + (2 if has_value else 1)]
    variants = dict(data.get("variants", {}))
    for name in overlay.drop_variants:
        if name not in variants:
            msg = f"{overlay.where}: drop_variants names variant {shown(name)}, which recipe {overlay.recipe} does not have.{suggest(name, variants)} Variants: {', '.join(variants) or 'none'}"
            raise ConfigError(msg)
        del variants[name]
    variants |= {name: dict(values) for name, values in overlay.variants}
    if not variants:
        msg = f"{overlay.where}: drop_variants leaves recipe {overlay.recipe} no variant; add one as a variants.NAME table"
        raise ConfigError(msg)
    return {
        "description": overlay.description or data.get("description", ""),
        "serve_flags": flags,
        "inputs": {**data.get("inputs", {}), **dict(overlay.inputs)},
        "env": env,
        "variants": variants,
    }


def check_topology(data: Mapping[str, Any], gpus_per_node: int, where: str) -> None:
    """Every variant (and the recipe's own inputs) spans whole nodes of ``gpus_per_node`` GPUs."""
    base = {k: str(v) for k, v in data.get("inputs", {}).items()}
    cases = {"inputs": base} | {
        f"variants.{name}": {**base, **{k: str(v) for k, v in values.items()}}
        for name, values in data.get("variants", {}).items()
    }
    for key, values in cases.items():
        try:
            nodes, gpus, tp, pp = (
                int(values.get(name, "1" if name != "GPUS_PER_NODE" else gpus_per_node)) for name in _TOPOLOGY
            )
        except ValueError as e:
            msg = f"{where}: {key}: NNODES, GPUS_PER_NODE, TP_SIZE and PP_SIZE must be integers ({e})"
            raise ConfigError(msg) from e
        if gpus != gpus_per_node:
            msg = f"{where}: {key}: GPUS_PER_NODE={gpus}, but the profile's gpus_per_node is {gpus_per_node}"
            raise ConfigError(msg)
        if tp * pp != nodes * gpus:
            msg = f"{where}: {key}: TP {tp} x PP {pp} = {tp * pp} GPUs does not fit NNODES {nodes} x {gpus} GPUs per node = {nodes * gpus}"
            raise ConfigError(msg)


def recipe_text(data: Mapping[str, Any], *, source: str, profile: str) -> str:
    """``data`` as the TOML file the launcher reads, with a header saying where it comes from."""
    lines = [
        f"# Generated by `imagebuild render` from {source} with {profile}: edit those, not this file.",
        "# Read by serve.py; `serve.py --dry-run` shows what a node would run with it.",
        "",
        f"description = {_string(data['description'])}",
        "",
        "serve_flags = [",
        *(f"  {_string(flag)}," for flag in data["serve_flags"]),
        "]",
    ]
    for table in ("inputs", "env"):
        lines += ["", f"[{table}]", *(f"{k} = {_string(v)}" for k, v in data[table].items())]
    for name, values in data["variants"].items():
        lines += ["", f"[variants.{name}]", *(f"{k} = {_string(v)}" for k, v in values.items())]
    return "\n".join(lines) + "\n"


def _string(value: object) -> str:
    """A TOML basic string: JSON's escaping is TOML's for the printable text a recipe holds."""
    return json.dumps(str(value), ensure_ascii=False)
