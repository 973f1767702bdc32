"""The plan: everything a node will do, decided from the environment and the recipe before any
process starts or any file is written. Pure; the dry run prints it, the runner executes it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from .argv import build_argv, resolve_env
from .barrier import BarrierSpec
from .flags import refuse_managed
from .inputs import SPECS, Inputs, normalize_input, read_input
from .jit_locks import AITER, MORI, LockDir
from .messages import LauncherError
from .recipes import Recipe, load_recipe, recipes_dir
from .sentinel import SENTINEL_NAME
from .text import shown
from .topology import resolve_topology
from .values import (
    check_option_value,
    check_printable,
    given,
    parse_backend,
    parse_bool,
    parse_float,
    parse_int,
    parse_name,
    split_command,
    suggest,
)

LOCAL_JOB = "local"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    recipe: Recipe
    variant: str | None  # the variant these inputs are (chosen, or matched), None if none matches
    inputs: Inputs
    env: Mapping[str, str]  # what the launcher sets for vLLM and the benchmark (effective values)
    overridden: Mapping[str, str]  # recipe env key -> the recipe value a submit-time value replaced
    argv: tuple[str, ...]
    benchmark: tuple[str, ...]
    benchmark_env: Mapping[str, str]  # exported to the benchmark only
    results_file: Path | None  # the file the benchmark must write, None if none is expected
    log_dir: Path
    ready_timeout_s: float
    stop_grace_s: float
    barrier: BarrierSpec | None  # None for a single node
    jit_lock_dirs: tuple[LockDir, ...]
    jit_lock_stale_min: float

    @property
    def log_file(self) -> Path:
        # The reference's name for it, so its log tooling finds ours.
        return self.log_dir / f"colocated_bench_NODE{self.inputs.node_rank}.log"

    @property
    def sentinel(self) -> Path:
        return self.log_dir / SENTINEL_NAME


def log_dir_for(environ: Mapping[str, str]) -> Path:
    """LOG_ROOT/<SLURM_JOB_ID>: the job id is data, so it can name only a directory inside LOG_ROOT."""
    root = given(environ, "LOG_ROOT") or SPECS["LOG_ROOT"].default
    if not Path(check_printable("LOG_ROOT", root)).is_absolute():
        msg = f"LOG_ROOT={root!r} must be an absolute path: set LOG_ROOT to the log volume's mount point"
        raise LauncherError(msg)
    job = given(environ, "SLURM_JOB_ID")
    return Path(root) / (parse_name("SLURM_JOB_ID", job) if job else LOCAL_JOB)


def select_variant(recipe: Recipe, name: str, environ: Mapping[str, str]) -> Mapping[str, str]:
    """The inputs a chosen variant sets. A submit-time value that contradicts an explicit choice is an
    error: silently running a different configuration than the one named is worse than stopping."""
    if not name:
        return {}
    if name not in recipe.variants:
        known = sorted(recipe.variants)
        msg = (f"recipe {recipe.name!r} has no variant {name!r}: set VARIANT or --variant to one of "
               f"{', '.join(known) or '(none)'}.{suggest(name, known)}")  # fmt: skip
        raise LauncherError(msg)
    settings = recipe.variants[name]
    for key, value in settings.items():
        submitted = given(environ, key)
        if submitted and normalize_input(key, submitted) != normalize_input(key, value):
            msg = (f"{key}={submitted} contradicts variant {name!r} ({key}={value}): "
                   f"unset {key} or choose another VARIANT")  # fmt: skip
            raise LauncherError(msg)
    return settings


def resolve_inputs(
    environ: Mapping[str, str], recipe: Recipe, variant: Mapping[str, str], extra_args: Sequence[str]
) -> Inputs:
    def configured(name: str) -> str:
        return variant.get(name) or recipe.inputs.get(name) or ""

    def get(name: str) -> str:
        # Submit-time environment, then the variant, then the recipe, then the launcher default.
        return given(environ, name) or configured(name) or SPECS[name].default

    model_path = get("MODEL_PATH")
    if not model_path:
        msg = "MODEL_PATH is not set: export MODEL_PATH=<model directory as mounted on the node>"
        raise LauncherError(msg)
    check_option_value("MODEL_PATH", model_path)
    topology = resolve_topology(environ, configured, recipe.name)
    enable_ep = parse_bool("ENABLE_EP", get("ENABLE_EP"))
    backend = parse_backend(get("ALL2ALL_BACKEND"))
    if backend is not None and not enable_ep:
        msg = f"ALL2ALL_BACKEND={backend} needs expert parallelism: set ENABLE_EP=1 or ALL2ALL_BACKEND=none"
        raise LauncherError(msg)
    extra_name, extra_raw = read_input(environ, "EXTRA_SERVE_ARGS")
    extra = split_command(extra_name, extra_raw)
    refuse_managed(extra, f"{extra_name}={extra_raw!r}")
    refuse_managed(extra_args, "the command line after --")
    return Inputs(
        model_path=model_path,
        served_name=check_option_value(
            "MODEL_NAME", get("MODEL_NAME") or Path(model_path.rstrip("/")).name or model_path
        ),
        node_rank=topology.node_rank,
        nnodes=topology.nnodes,
        master_addr=topology.master_addr,
        master_port=parse_int("MASTER_PORT", get("MASTER_PORT"), low=1, high=65535),
        serve_port=parse_int("SERVE_PORT", get("SERVE_PORT"), low=1, high=65535),
        gpus_per_node=topology.gpus_per_node,
        tp_size=topology.tp_size,
        pp_size=topology.pp_size,
        enable_ep=enable_ep,
        all2all_backend=backend,
        extra_args=extra + tuple(extra_args),
        addresses=topology.addresses,
    )


def resolve_benchmark_env(environ: Mapping[str, str], inputs: Inputs) -> dict[str, str]:
    """What the reference's benchmark scripts read; xP/yD only name their log files, and the PERF_*
    labels stop a colocated run from being reported as `disagg_1P0D`."""
    ep_tag = f"ep_{inputs.all2all_backend or 'default'}" if inputs.enable_ep else "noep"
    return {
        "BENCHMARK_PORT": str(inputs.serve_port),
        "xP": str(parse_int("xP", given(environ, "xP") or SPECS["xP"].default, low=0)),
        "yD": str(parse_int("yD", given(environ, "yD") or SPECS["yD"].default, low=0)),
        "PERF_DEPLOYMENT_TYPE": check_printable(
            "PERF_DEPLOYMENT_TYPE", given(environ, "PERF_DEPLOYMENT_TYPE")
        )
        or "colocated",
        "PERF_TAGS": check_printable("PERF_TAGS", given(environ, "PERF_TAGS"))
        or f"vllm_multinode,colocated,pp{inputs.pp_size}xtp{inputs.tp_size},{ep_tag}",
    }


def resolve_jit_lock_dirs(environ: Mapping[str, str], env: Mapping[str, str]) -> tuple[LockDir, ...]:
    """AITER's and MoRI's JIT caches, absolute: the cleanup looks only under them."""

    def cache_dir(name: str, raw: str) -> Path:
        if not Path(check_printable(name, raw)).is_absolute():
            msg = f"{name}={shown(raw)} must be an absolute path: set {name} to the JIT cache's directory"
            raise LauncherError(msg)
        return Path(raw)

    dirs = []
    aiter = given(environ, "AITER_JIT_DIR") or env.get("AITER_JIT_DIR", "")
    if aiter:
        dirs.append(LockDir(owner=AITER, path=cache_dir("AITER_JIT_DIR", aiter)))
    mori = given(environ, "MORI_JIT_CACHE_DIR") or env.get("MORI_JIT_CACHE_DIR", "")
    home = Path(given(environ, "HOME")) if given(environ, "HOME") else Path.home()
    dirs.append(
        LockDir(owner=MORI, path=cache_dir("MORI_JIT_CACHE_DIR", mori) if mori else home / ".mori" / "jit")
    )
    return tuple(dirs)


def resolve_plan(
    environ: Mapping[str, str],
    *,
    recipe_name: str | None = None,
    variant_name: str | None = None,
    extra_args: Sequence[str] = (),
) -> Plan:
    """Decide everything from the environment and the recipe; starts nothing, writes nothing."""
    recipe = load_recipe(
        recipe_name or given(environ, "RECIPE") or SPECS["RECIPE"].default, recipes_dir(environ)
    )
    chosen = variant_name or given(environ, "VARIANT")
    inputs = resolve_inputs(environ, recipe, select_variant(recipe, chosen, environ), extra_args)
    current = inputs.recipe_settable()
    variant = chosen or next(
        (name for name, settings in recipe.variants.items()
         if all(normalize_input(key, value) == current[key] for key, value in settings.items())),
        None,
    )  # fmt: skip
    env, overridden = resolve_env(environ, recipe)
    # The benchmark must request the name vLLM serves: a mismatch made every request 404.
    env["SERVED_MODEL_NAME"] = inputs.served_name
    env["NIAH_MODEL"] = inputs.served_name
    env["SERVE_PORT"] = str(inputs.serve_port)
    # Python buffers a pipe in blocks; line by line, the readiness line and the log tail are current.
    env["PYTHONUNBUFFERED"] = given(environ, "PYTHONUNBUFFERED") or "1"

    log_dir = log_dir_for(environ)
    results = given(environ, "BENCHMARK_RESULTS") or SPECS["BENCHMARK_RESULTS"].default
    results_file = None if results.lower() == "none" else log_dir / parse_name("BENCHMARK_RESULTS", results)
    benchmark = split_command("BENCHMARK_CMD", given(environ, "BENCHMARK_CMD"))
    ready_name, ready_raw = read_input(environ, "LOG_WAIT_TIMEOUT_SECONDS")
    barrier = None
    if inputs.nnodes > 1:
        barrier = BarrierSpec(
            port=parse_int("CONTAINER_BARRIER_PORT", given(environ, "CONTAINER_BARRIER_PORT")
                           or SPECS["CONTAINER_BARRIER_PORT"].default, low=1, high=65535),
            timeout_s=parse_float("BARRIER_TIMEOUT_S", given(environ, "BARRIER_TIMEOUT_S")
                                  or SPECS["BARRIER_TIMEOUT_S"].default),
            nnodes=inputs.nnodes,
            rank=inputs.node_rank,
            head_addr=inputs.master_addr,
            addresses=inputs.addresses,
            job=log_dir.name,
        )  # fmt: skip
    return Plan(
        recipe=recipe,
        variant=variant,
        inputs=inputs,
        env=env,
        overridden=overridden,
        argv=build_argv(inputs, env, recipe.serve_flags),
        benchmark=benchmark,
        benchmark_env=resolve_benchmark_env(environ, inputs),
        results_file=results_file if benchmark else None,
        log_dir=log_dir,
        ready_timeout_s=parse_float(ready_name, ready_raw or SPECS["LOG_WAIT_TIMEOUT_SECONDS"].default),
        stop_grace_s=parse_float("STOP_GRACE_S", given(environ, "STOP_GRACE_S") or SPECS["STOP_GRACE_S"].default),
        barrier=barrier,
        jit_lock_dirs=resolve_jit_lock_dirs(environ, env),
        jit_lock_stale_min=parse_float("JIT_LOCK_STALE_MIN", given(environ, "JIT_LOCK_STALE_MIN")
                                       or SPECS["JIT_LOCK_STALE_MIN"].default),
    )  # fmt: skip
