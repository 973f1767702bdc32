"""The environment variables the launcher reads: one table that drives --help, recipe validation and
the lookup of aliases (the reference's names next to the launcher's own); and Inputs, their
resolved values for one node."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from .messages import LauncherError
from .values import given, parse_backend, parse_bool, parse_int

HEAD_RANK = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class InputSpec:
    name: str
    default: str
    help: str
    group: str
    in_recipe: bool = False  # a recipe's [inputs] table or a variant may give its default
    alias_of: str = ""  # the same input under another name; giving both with different values is an error
    also_env: bool = False  # read by the launcher but also by vLLM/AITER/MoRI: a recipe's [env] may set it


GROUPS = {
    "node": "this node and the job's topology",
    "slurm": "read from the SLURM allocation when the variables above are unset",
    "barrier": "container barrier: no node starts vLLM before every node's container is up",
    "serve": "what vLLM serves",
    "benchmark": "the benchmark the head runs once vLLM is ready",
    "run": "logs, timeouts, dry run",
    "jit": "stale JIT lock cleanup at start (locks a killed job left in a persistent cache)",
}

INPUTS: tuple[InputSpec, ...] = (
    InputSpec(name="NODE_RANK", default="", group="node",
              help="rank of this node; 0 is the head, others run --headless [SLURM_NODEID, else 0]"),
    InputSpec(name="NNODES", default="", group="node", in_recipe=True,
              help="nodes in the job [SLURM_NNODES, else SLURM_JOB_NUM_NODES, else the recipe, else 1]"),
    InputSpec(name="MASTER_ADDR", default="", group="node",
              help="head node address [IPADDRS' first, else SLURM_JOB_NODELIST's first host]"),
    InputSpec(name="MASTER_PORT", default="29500", group="node", help="port of vLLM's rendezvous on the head"),
    InputSpec(name="IPADDRS", default="", group="node",
              help="every node's address, comma-separated, in rank order (one per node)"),
    InputSpec(name="GPUS_PER_NODE", default="8", group="node", in_recipe=True, help="GPUs on each node"),
    InputSpec(name="SLURM_NNODES", default="", group="slurm", help="nodes in the job step (srun sets it)"),
    InputSpec(name="SLURM_JOB_NUM_NODES", default="", group="slurm", help="nodes in the job (sbatch sets it)"),
    InputSpec(name="SLURM_NODEID", default="", group="slurm", help="this node's index in the allocation"),
    InputSpec(name="SLURM_JOB_NODELIST", default="", group="slurm",
              help="the job's hosts as a hostlist, e.g. node[01-02,05]"),
    InputSpec(name="CONTAINER_BARRIER_PORT", default="2223", group="barrier",
              help="TCP port the head listens on (all interfaces); workers connect to MASTER_ADDR"),
    InputSpec(name="BARRIER_TIMEOUT_S", default="1800", group="barrier",
              help="seconds to wait for every node; then every node stops, naming the missing ones"),
    InputSpec(name="MODEL_PATH", default="", group="serve", help="model directory handed to `vllm serve` (required)"),
    InputSpec(name="MODEL_NAME", default="", group="serve", in_recipe=True,
              help="served model name [last component of MODEL_PATH]"),
    InputSpec(name="RECIPE", default="kimi-k3", group="serve", help="recipe: a file in the recipes directory (--recipe)"),
    InputSpec(name="VARIANT", default="", group="serve", help="named configuration of the recipe (--variant)"),
    InputSpec(name="TP_SIZE", default="", group="serve", in_recipe=True, help="tensor parallel size [GPUS_PER_NODE]"),
    InputSpec(name="PP_SIZE", default="", group="serve", in_recipe=True, help="pipeline parallel size [NNODES]"),
    InputSpec(name="ENABLE_EP", default="0", group="serve", in_recipe=True, help="1 adds --enable-expert-parallel"),
    InputSpec(name="ALL2ALL_BACKEND", default="none", group="serve", in_recipe=True,
              help="--all2all-backend with ENABLE_EP=1; none leaves vLLM's default"),
    InputSpec(name="SERVE_PORT", default="8000", group="serve", help="HTTP port of the API server on the head"),
    InputSpec(name="EXTRA_SERVE_ARGS", default="", group="serve",
              help="more vLLM flags, appended last: shell words (no expansion) or a JSON array"),
    InputSpec(name="COLOCATED_EXTRA_ARGS", default="", group="serve", alias_of="EXTRA_SERVE_ARGS",
              help="the reference's name for EXTRA_SERVE_ARGS"),
    InputSpec(name="BENCHMARK_CMD", default="", group="benchmark",
              help="run on the head once vLLM is ready, same syntax; none: wait for vLLM to exit"),
    InputSpec(name="BENCHMARK_RESULTS", default="perf.csv", group="benchmark",
              help="file the benchmark must write in the log directory; none if it writes none"),
    InputSpec(name="xP", default="1", group="benchmark", help="exported to the benchmark (prefill instances)"),
    InputSpec(name="yD", default="0", group="benchmark", help="exported to the benchmark (decode pools)"),
    InputSpec(name="PERF_DEPLOYMENT_TYPE", default="", group="benchmark",
              help="exported to the benchmark [colocated]"),
    InputSpec(name="PERF_TAGS", default="", group="benchmark",
              help="exported to the benchmark [vllm_multinode,colocated,pp<PP>xtp<TP>,ep_<backend>|noep]"),
    InputSpec(name="DRY_RUN", default="0", group="run", help="1 prints the env and argv and exits (--dry-run)"),
    InputSpec(name="SLURM_JOB_ID", default="", group="run", help="names the log directory, a plain name [local]"),
    InputSpec(name="LOG_ROOT", default="/run_logs", group="run",
              help="absolute; logs and the .shutdown sentinel go to LOG_ROOT/<SLURM_JOB_ID>/, shared by all nodes"),
    InputSpec(name="LOG_WAIT_TIMEOUT_SECONDS", default="4000", group="run",
              help="seconds the head waits for vLLM to be ready"),
    InputSpec(name="READY_TIMEOUT_S", default="", group="run", alias_of="LOG_WAIT_TIMEOUT_SECONDS",
              help="the launcher's earlier name for LOG_WAIT_TIMEOUT_SECONDS"),
    InputSpec(name="STOP_GRACE_S", default="10", group="run", help="seconds between SIGTERM and SIGKILL at teardown"),
    InputSpec(name="LAUNCHER_RECIPES_DIR", default="", group="run", help="recipes directory [recipes/ next to serve.py]"),
    InputSpec(name="AITER_JIT_DIR", default="", group="jit", also_env=True,
              help="AITER's JIT cache (the image sets it); its lock files are checked"),
    InputSpec(name="MORI_JIT_CACHE_DIR", default="", group="jit", also_env=True,
              help="MoRI's JIT cache [$HOME/.mori/jit]; its *.hsaco.lock files are checked"),
    InputSpec(name="JIT_LOCK_STALE_MIN", default="60", group="jit",
              help="a lock file older than this many minutes is removed; younger ones are left alone"),
)  # fmt: skip
SPECS = {spec.name: spec for spec in INPUTS}
RECIPE_INPUTS = tuple(spec.name for spec in INPUTS if spec.in_recipe)
# What a recipe's [env] must not set: the launcher decides these itself.
LAUNCHER_ONLY = frozenset(spec.name for spec in INPUTS if not spec.also_env)


def read_input(environ: Mapping[str, str], name: str) -> tuple[str, str]:
    """The submit-time value of an input and the name it was given under (its own or an alias's);
    ("name", "") when unset."""
    names = [name, *(spec.name for spec in INPUTS if spec.alias_of == name)]
    values = {alias: given(environ, alias) for alias in names if given(environ, alias)}
    if len(set(values.values())) > 1:
        shown = " and ".join(f"{alias}={value!r}" for alias, value in values.items())
        msg = f"{shown} name the same input with different values: set only one of {', '.join(values)}"
        raise LauncherError(msg)
    return next(iter(values.items()), (name, ""))


def normalize_input(name: str, raw: str) -> object:
    """The parsed value of an input a recipe may set, so "1" and "true" compare equal."""
    if name == "ENABLE_EP":
        return parse_bool(name, raw)
    if name == "ALL2ALL_BACKEND":
        return parse_backend(raw)
    if name in ("NNODES", "GPUS_PER_NODE", "TP_SIZE", "PP_SIZE"):
        return parse_int(name, raw, low=1)
    return raw


@dataclasses.dataclass(frozen=True, kw_only=True)
class Inputs:
    model_path: str
    served_name: str
    node_rank: int
    nnodes: int
    master_addr: str
    master_port: int
    serve_port: int
    gpus_per_node: int
    tp_size: int
    pp_size: int
    enable_ep: bool
    all2all_backend: str | None
    extra_args: tuple[str, ...]
    addresses: tuple[str, ...]  # every node's address in rank order; () when unknown

    @property
    def is_head(self) -> bool:
        return self.node_rank == HEAD_RANK

    def recipe_settable(self) -> dict[str, object]:
        """The parsed values of RECIPE_INPUTS, to match them against a recipe's variants."""
        return {
            "MODEL_NAME": self.served_name, "NNODES": self.nnodes, "GPUS_PER_NODE": self.gpus_per_node,
            "TP_SIZE": self.tp_size, "PP_SIZE": self.pp_size, "ENABLE_EP": self.enable_ep,
            "ALL2ALL_BACKEND": self.all2all_backend,
        }  # fmt: skip
