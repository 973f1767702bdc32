"""vLLM's side of the plan, pure: the environment it gets (the recipe's, submit-time values winning)
and its command line, in the reference's order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .flags import (
    CPU_TIMEOUT,
    KV_BLOCK_SIZES,
    KV_CACHE_DTYPES,
    KV_CACHE_MAX_BYTES,
    OPTIONAL_ENV_FLAGS,
    REQUIRED_ENV_FLAGS,
)
from .inputs import Inputs
from .messages import LauncherError
from .recipes import Recipe
from .values import check_printable, given, parse_choice, parse_float, parse_int


def resolve_env(environ: Mapping[str, str], recipe: Recipe) -> tuple[dict[str, str], dict[str, str]]:
    """The recipe env with submit-time values winning (skip-if-set), and what they replaced."""
    env: dict[str, str] = {}
    overridden: dict[str, str] = {}
    for key, value in recipe.env.items():
        submitted = check_printable(key, given(environ, key))
        env[key] = submitted or value
        if submitted and submitted != value:
            overridden[key] = value
    # Variables that become vLLM flags count when set at submit time even if the recipe lacks them.
    for key in (*REQUIRED_ENV_FLAGS, CPU_TIMEOUT, *(variable for variable, _ in OPTIONAL_ENV_FLAGS)):
        if key not in env and given(environ, key):
            env[key] = check_printable(key, given(environ, key))
    for key in REQUIRED_ENV_FLAGS:
        if key not in env:
            msg = f"{key} is not set: give it in the recipe's [env] ({recipe.path}) or at submit time"
            raise LauncherError(msg)
    check_flag_values(env)
    return env, overridden


def check_flag_values(env: Mapping[str, str]) -> None:
    """Every env value that becomes a vLLM flag's value, by its kind: a word vLLM would refuse (or read
    as a flag: `fp8 --x` is one argv element, but `-16` is not a block size) stops the launch here, in
    one line, instead of in vLLM's argument parser on every node."""
    parse_float("GPU_MEMORY_UTILIZATION", env["GPU_MEMORY_UTILIZATION"], high=1.0)
    for key in ("DISTRIBUTED_TIMEOUT_SECONDS", CPU_TIMEOUT):
        if key in env:
            parse_int(key, env[key], low=1)
    if env.get("KV_CACHE_DTYPE"):
        parse_choice("KV_CACHE_DTYPE", env["KV_CACHE_DTYPE"], KV_CACHE_DTYPES)
    if env.get("KV_BLOCK_SIZE"):
        parse_choice("KV_BLOCK_SIZE", env["KV_BLOCK_SIZE"], KV_BLOCK_SIZES)
    if env.get("KV_CACHE_MEMORY_BYTES"):
        parse_int("KV_CACHE_MEMORY_BYTES", env["KV_CACHE_MEMORY_BYTES"], low=1, high=KV_CACHE_MAX_BYTES)


def build_argv(inputs: Inputs, env: Mapping[str, str], serve_flags: Sequence[str]) -> tuple[str, ...]:
    """The vLLM command line, in the reference's order. Pure."""
    argv = [
        "vllm", "serve", inputs.model_path,
        "--served-model-name", inputs.served_name,
        "--tensor-parallel-size", str(inputs.tp_size),
        "--pipeline-parallel-size", str(inputs.pp_size),
        "--distributed-executor-backend", "mp",
        "--nnodes", str(inputs.nnodes),
        "--node-rank", str(inputs.node_rank),
        "--master-addr", inputs.master_addr,
        "--master-port", str(inputs.master_port),
        "--trust-remote-code",
        "--gpu-memory-utilization", env["GPU_MEMORY_UTILIZATION"],
        "--distributed-timeout-seconds", env["DISTRIBUTED_TIMEOUT_SECONDS"],
        "--cpu-distributed-timeout-seconds", env.get(CPU_TIMEOUT) or env["DISTRIBUTED_TIMEOUT_SECONDS"],
    ]  # fmt: skip
    for variable, flag in OPTIONAL_ENV_FLAGS:
        if env.get(variable):
            argv += [flag, env[variable]]
    if inputs.enable_ep:
        argv.append("--enable-expert-parallel")
        if inputs.all2all_backend is not None:
            argv += ["--all2all-backend", inputs.all2all_backend]
    argv += ["--port", str(inputs.serve_port)] if inputs.is_head else ["--headless"]
    return (*argv, *serve_flags, *inputs.extra_args)
