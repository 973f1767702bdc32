"""The recipe a job runs, read by the launcher's own code: the job must agree with the image's launcher.

`check_topology` plans node 0 the way the launcher in the image will, with the job's node count and
--env values, so an unknown recipe or variant, a bad recipe value, or a node count that contradicts the
recipe (TP x PP must equal nodes x GPUs per node) is refused before any script is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import ConfigError
from imagebuild.launcher.messages import LauncherError
from imagebuild.launcher.plan import Plan, resolve_plan
from imagebuild.slurm.job import Job

# Stands in for the head's address, which only the running job knows; the plan needs one when NNODES > 1.
PLANNING_ADDR = "head.invalid"


@dataclass(frozen=True, kw_only=True)
class Topology:
    gpus_per_node: int
    tp_size: int
    pp_size: int
    served_name: str


def _plan(environ: Mapping[str, str], job: Job) -> Plan:
    return resolve_plan(environ, recipe_name=job.recipe, variant_name=job.variant)


def check_topology(job: Job, recipes_dir: Path | None = None) -> Topology:
    """``recipes_dir``: the recipes of the image's arch (imagebuild.slurm.arch_recipes); None: the launcher's own."""
    environ = {
        # The arch's recipes first: a LAUNCHER_RECIPES_DIR given with --env still wins.
        **({"LAUNCHER_RECIPES_DIR": str(recipes_dir)} if recipes_dir is not None else {}),
        **dict(job.env),
        "MODEL_PATH": job.model_path,
        "NODE_RANK": "0",
        "NNODES": str(job.nodes),
        "MASTER_ADDR": PLANNING_ADDR,
    }
    try:
        inputs = _plan(environ, job).inputs
    except LauncherError as error:
        raise ConfigError(_explain(error, environ, job)) from error
    return Topology(
        gpus_per_node=inputs.gpus_per_node,
        tp_size=inputs.tp_size,
        pp_size=inputs.pp_size,
        served_name=inputs.served_name,
    )


def _explain(error: LauncherError, environ: Mapping[str, str], job: Job) -> str:
    """The launcher's message, or for a node count the recipe contradicts, what the recipe needs."""
    where = f"recipe {job.recipe} variant {job.variant}"
    try:
        # The recipe's own topology: planned without our node count.
        wanted = _plan({k: v for k, v in environ.items() if k != "NNODES"}, job).inputs
    except LauncherError:
        return f"{where}: {error}"
    gpus = wanted.tp_size * wanted.pp_size
    if job.nodes == wanted.nnodes:  # the node count is what the recipe wants: something else is wrong
        return f"{where}: {error}"
    fits = (
        f"use --nodes {gpus // wanted.gpus_per_node}"
        if gpus % wanted.gpus_per_node == 0
        else "no node count fits"
    )
    return (
        f"--nodes {job.nodes} does not fit {where}: TP {wanted.tp_size} x PP {wanted.pp_size} = {gpus} GPUs, "
        f"but {job.nodes} nodes x {wanted.gpus_per_node} GPUs per node = {job.nodes * wanted.gpus_per_node}; "
        f"{fits}, or give TP_SIZE, PP_SIZE or GPUS_PER_NODE with --env"
    )
