"""The launcher's part of the expectations: the dry runs of the recipe the image carries.

The topology comes from the recipe itself (its [inputs]): the arch profile that changes the
recipe changes the job a dry run plans (imagebuild.inputs.arch_recipe).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import ConfigError
from imagebuild.inputs.layout import LAUNCHER_RECIPE


@dataclass(frozen=True, kw_only=True)
class LauncherCase:
    """A dry run of the bundled launcher and the argv the host's launcher gives for it."""

    name: str
    env: Mapping[str, str]
    argv: tuple[str, ...]


def banned_env_names(recipes_dir: Path, recipe: str) -> tuple[str, ...]:
    """Every env key of the launcher's recipe: runtime tuning the image must not bake in."""
    path = recipes_dir / f"{recipe}.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        msg = f"{path}: cannot read the launcher recipe to derive the banned ENV ({e})"
        raise ConfigError(msg) from e
    env = data.get("env", {})
    return tuple(sorted(env)) if isinstance(env, dict) else ()


def _recipe_topology(recipes_dir: Path, recipe: str) -> dict[str, str]:
    """NNODES, TP_SIZE and PP_SIZE as the recipe's [inputs] give them (the job a dry run plans)."""
    path = recipes_dir / f"{recipe}.toml"
    try:
        inputs = tomllib.loads(path.read_text(encoding="utf-8")).get("inputs", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        msg = f"{path}: cannot read the launcher recipe to derive the launcher cases ({e})"
        raise ConfigError(msg) from e
    defaults = {"NNODES": "1", "TP_SIZE": "1", "PP_SIZE": "1"}
    return {name: str(inputs.get(name, default)) for name, default in defaults.items()}


def launcher_cases(recipes_dir: Path) -> tuple[LauncherCase, ...]:
    """The K3 head (and a worker, on more than one node) of the recipe's job, as the host's launcher
    plans them: on gfx942 a 2-node TP 8 x PP 2 job, on gfx950 one node, TP 8."""
    from imagebuild.launcher.messages import LauncherError
    from imagebuild.launcher.plan import resolve_plan

    topology = _recipe_topology(recipes_dir, LAUNCHER_RECIPE)
    common = {
        "MODEL_PATH": "/models/kimi-k3",
        **topology,
        "MASTER_ADDR": "10.0.0.1",
        "RECIPE": LAUNCHER_RECIPE,
    }
    ranks = (("head", "0"), ("worker", "1")) if int(topology["NNODES"]) > 1 else (("head", "0"),)
    cases = []
    for name, rank in ranks:
        env = {**common, "NODE_RANK": rank, "LAUNCHER_RECIPES_DIR": str(recipes_dir)}
        try:
            plan = resolve_plan(env)
        except LauncherError as e:
            msg = f"the host's launcher cannot plan the K3 {name} ({e}); fix the recipe in {recipes_dir}"
            raise ConfigError(msg) from e
        env.pop("LAUNCHER_RECIPES_DIR")  # the bundled launcher uses the recipes beside it
        cases.append(LauncherCase(name=name, env=env, argv=plan.argv))
    return tuple(cases)
