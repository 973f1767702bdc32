"""Model recipes: one TOML file per model, read and validated into a Recipe; the TOML stays here."""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from pathlib import Path

from .flags import refuse_managed
from .inputs import LAUNCHER_ONLY, RECIPE_INPUTS
from .messages import LauncherError
from .values import check_printable, given, parse_name, suggest

RECIPE_KEYS = ("description", "serve_flags", "inputs", "env", "variants")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Recipe:
    name: str
    path: Path
    description: str
    serve_flags: tuple[str, ...]
    inputs: Mapping[str, str]  # defaults for launcher inputs (RECIPE_INPUTS)
    env: Mapping[str, str]  # environment for vLLM, applied skip-if-set
    variants: Mapping[str, Mapping[str, str]]  # variant name -> launcher inputs it sets


def recipes_dir(environ: Mapping[str, str]) -> Path:
    override = given(environ, "LAUNCHER_RECIPES_DIR")
    return Path(override) if override else Path(__file__).resolve().parent / "recipes"


def recipe_names(directory: Path) -> list[str]:
    return sorted(path.stem for path in directory.glob("*.toml"))


def _string_table(value: object, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        msg = f"{where} must be a table of strings"
        raise LauncherError(msg)
    for key, item in value.items():
        if not isinstance(item, str):
            msg = f'{where}: {key} = {item!r} must be a string: write {key} = "{item}"'
            raise LauncherError(msg)
        check_printable(f"{where}: {key}", item)
    return dict(value)


def _check_input_names(table: Mapping[str, str], where: str) -> None:
    for key in table:
        if key not in RECIPE_INPUTS:
            hint = suggest(key, RECIPE_INPUTS)
            msg = f"{where}: {key} is not an input a recipe may set ({', '.join(RECIPE_INPUTS)}).{hint}"
            raise LauncherError(msg)


def load_recipe(name: str, directory: Path) -> Recipe:
    """The recipe `name` from `directory`; the name is data, never a path (RECIPE=../x is refused)."""
    path = directory / f"{parse_name('RECIPE', name)}.toml"
    if not path.is_file():
        known = recipe_names(directory)
        msg = (f"unknown recipe {name!r}: set RECIPE or --recipe to one of {', '.join(known) or '(none)'} "
               f"in {directory}.{suggest(name, known)}")  # fmt: skip
        raise LauncherError(msg)
    try:
        with path.open("rb") as stream:
            data = tomllib.load(stream)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        msg = f"{path}: cannot read the recipe ({error}): fix the file (UTF-8 TOML)"
        raise LauncherError(msg) from error
    for key in data:
        if key not in RECIPE_KEYS:
            msg = f"{path}: unknown key {key!r} (known: {', '.join(RECIPE_KEYS)}).{suggest(key, RECIPE_KEYS)}"
            raise LauncherError(msg)

    flags = data.get("serve_flags", [])
    if not isinstance(flags, list) or not all(isinstance(flag, str) for flag in flags):
        msg = f"{path}: serve_flags must be an array of strings, one per argv element"
        raise LauncherError(msg)
    for flag in flags:
        check_printable(f"{path}: serve_flags", flag)
    refuse_managed(flags, f"{path}: serve_flags")

    inputs = _string_table(data.get("inputs", {}), f"{path} [inputs]")
    _check_input_names(inputs, f"{path} [inputs]")
    env = _string_table(data.get("env", {}), f"{path} [env]")
    for key in env:
        if key in LAUNCHER_ONLY:
            where = "move it to [inputs] (or a variant)" if key in RECIPE_INPUTS else "set it at submit time"
            msg = f"{path} [env]: {key} is a launcher input: {where}"
            raise LauncherError(msg)
    raw_variants = data.get("variants", {})
    if not isinstance(raw_variants, dict):
        msg = f"{path}: variants must be tables, [variants.<name>]"
        raise LauncherError(msg)
    variants: dict[str, Mapping[str, str]] = {}
    for variant, table in raw_variants.items():
        where = f"{path} [variants.{variant}]"
        variants[variant] = _string_table(table, where)
        _check_input_names(variants[variant], where)

    return Recipe(
        name=name,
        path=path,
        description=str(data.get("description", "")),
        serve_flags=tuple(flags),
        inputs=inputs,
        env=env,
        variants=variants,
    )
