#!/usr/bin/env python3
"""Start one node of a multi-node vLLM deployment from a model recipe.

Every node of a job runs this program. Node 0 (the head) serves the API, waits until vLLM is
ready, runs the benchmark and, however it exits, raises a shutdown sentinel on the shared log
volume; the other nodes run `vllm serve --headless` and stop when the sentinel appears.
Configuration comes from environment variables (the names the cluster scripts already use)
and one TOML recipe per model.

This file runs on the image's python3 (3.11 or later) with the standard library only:
imagebuild is not installed in the image, so nothing here may import it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import http.client
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
import urllib.request
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import IO

READY_MARKER = "Application startup complete"
SENTINEL_NAME = ".shutdown"
POLL_S = 0.25
TAIL_LINES = 40
HEAD_RANK = 0
# Turned into an orderly teardown (sentinel, then stop vLLM) instead of dying on the spot.
HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")
# Flags the launcher emits itself; a recipe repeating one would silently win (vLLM keeps the last).
MANAGED_FLAGS = (
    "--served-model-name", "--tensor-parallel-size", "--pipeline-parallel-size",
    "--distributed-executor-backend", "--nnodes", "--node-rank", "--master-addr", "--master-port",
    "--trust-remote-code", "--gpu-memory-utilization", "--distributed-timeout-seconds",
    "--cpu-distributed-timeout-seconds", "--kv-cache-dtype", "--block-size", "--kv-cache-memory-bytes",
    "--enable-expert-parallel", "--all2all-backend", "--port", "--headless",
)  # fmt: skip
# Recipe env variables that also become vLLM flags.
REQUIRED_ENV_FLAGS = ("GPU_MEMORY_UTILIZATION", "DISTRIBUTED_TIMEOUT_SECONDS")
# In argv order; each only when set.
OPTIONAL_ENV_FLAGS = (
    ("KV_CACHE_DTYPE", "--kv-cache-dtype"),
    ("KV_BLOCK_SIZE", "--block-size"),
    ("KV_CACHE_MEMORY_BYTES", "--kv-cache-memory-bytes"),
)


class LauncherError(Exception):
    """An error for the user: one line naming the variable or file and what to do, plus optional detail."""

    def __init__(self, message: str, *, exit_code: int = 2, detail: str = "") -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.detail = detail


# --- inputs -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class InputSpec:
    """One environment variable the launcher reads; the table drives --help and recipe validation."""

    name: str
    default: str
    help: str
    in_recipe: bool = False  # a recipe's [inputs] table or a variant may give its default


INPUTS: tuple[InputSpec, ...] = (
    InputSpec(name="MODEL_PATH", default="", help="model directory handed to `vllm serve` (required)"),
    InputSpec(name="MODEL_NAME", default="", in_recipe=True,
              help="served model name [last component of MODEL_PATH]"),
    InputSpec(name="NODE_RANK", default="0", help="rank of this node; 0 is the head, others run --headless"),
    InputSpec(name="NNODES", default="1", in_recipe=True, help="number of nodes in the job"),
    InputSpec(name="MASTER_ADDR", default="", help="head node address (required when NNODES > 1)"),
    InputSpec(name="MASTER_PORT", default="29500", help="port of the head's rendezvous"),
    InputSpec(name="SERVE_PORT", default="8000", help="HTTP port of the API server on the head"),
    InputSpec(name="GPUS_PER_NODE", default="8", in_recipe=True, help="GPUs on each node"),
    InputSpec(name="TP_SIZE", default="", in_recipe=True, help="tensor parallel size [GPUS_PER_NODE]"),
    InputSpec(name="PP_SIZE", default="", in_recipe=True, help="pipeline parallel size [NNODES]"),
    InputSpec(name="ENABLE_EP", default="0", in_recipe=True, help="1 adds --enable-expert-parallel"),
    InputSpec(name="ALL2ALL_BACKEND", default="none", in_recipe=True,
              help="--all2all-backend with ENABLE_EP=1; none leaves vLLM's default"),
    InputSpec(name="RECIPE", default="kimi-k3", help="recipe: a file in the recipes directory (--recipe)"),
    InputSpec(name="VARIANT", default="", help="named configuration of the recipe (--variant)"),
    InputSpec(name="EXTRA_SERVE_ARGS", default="",
              help="more vLLM flags, appended last: shell words (no expansion) or a JSON array"),
    InputSpec(name="BENCHMARK_CMD", default="",
              help="run on the head once vLLM is ready, same syntax; none: wait for vLLM to exit"),
    InputSpec(name="DRY_RUN", default="0", help="1 prints the env and argv and exits (--dry-run)"),
    InputSpec(name="SLURM_JOB_ID", default="", help="names the log directory [local]"),
    InputSpec(name="LOG_ROOT", default="/run_logs",
              help="logs go to LOG_ROOT/<SLURM_JOB_ID>/, on a volume all nodes share"),
    InputSpec(name="READY_TIMEOUT_S", default="",
              help="seconds the head waits for vLLM [VLLM_ENGINE_READY_TIMEOUT_S, else 3600]"),
    InputSpec(name="STOP_GRACE_S", default="10", help="seconds between SIGTERM and SIGKILL at teardown"),
    InputSpec(name="LAUNCHER_RECIPES_DIR", default="", help="recipes directory [recipes/ next to serve.py]"),
)  # fmt: skip
_SPECS = {spec.name: spec for spec in INPUTS}
RECIPE_INPUTS = tuple(spec.name for spec in INPUTS if spec.in_recipe)


def _given(environ: Mapping[str, str], name: str) -> str:
    """A submit-time value; empty counts as unset, as `${VAR:-default}` does in the cluster scripts."""
    return environ.get(name, "").strip()


def _suggest(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f" Perhaps you meant {close[0]}?" if close else ""


def parse_int(name: str, raw: str, *, low: int, high: int | None = None) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"in {low}..{high}"
        msg = f"{name}={raw!r} must be an integer {bounds}: fix {name}"
        raise LauncherError(msg)
    return value


def parse_float(name: str, raw: str, *, high: float | None = None) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or (high is not None and value > high):
        bounds = "> 0" if high is None else f"in (0, {high:g}]"
        msg = f"{name}={raw!r} must be a number {bounds}: fix {name}"
        raise LauncherError(msg)
    return value


def parse_bool(name: str, raw: str) -> bool:
    word = raw.strip().lower()
    if word in TRUE_WORDS or word in FALSE_WORDS:
        return word in TRUE_WORDS
    msg = f"{name}={raw!r} is not a boolean: set {name} to 1 or 0"
    raise LauncherError(msg)


def parse_backend(raw: str) -> str | None:
    word = raw.strip()
    return None if word.lower() in ("", "none") else word


def split_command(name: str, raw: str) -> tuple[str, ...]:
    """Words of a command-line input, never through a shell: a JSON array of strings, else POSIX
    shell words without expansion (a JSON argument then needs single quotes around it)."""
    text = raw.strip()
    if text.startswith("["):
        try:
            words = json.loads(text)
        except json.JSONDecodeError as error:
            msg = f"{name} starts with '[' but is not a JSON array ({error}): fix its JSON"
            raise LauncherError(msg) from error
        if not isinstance(words, list) or not all(isinstance(word, str) for word in words):
            msg = f"{name} must be a JSON array of strings"
            raise LauncherError(msg)
        return tuple(words)
    try:
        return tuple(shlex.split(text))
    except ValueError as error:
        msg = f"{name} cannot be split into words ({error}): check its quotes"
        raise LauncherError(msg) from error


def normalize_input(name: str, raw: str) -> object:
    """The parsed value of an input a recipe may set, so "1" and "true" compare equal."""
    if name == "ENABLE_EP":
        return parse_bool(name, raw)
    if name == "ALL2ALL_BACKEND":
        return parse_backend(raw)
    if name in ("NNODES", "GPUS_PER_NODE", "TP_SIZE", "PP_SIZE"):
        return parse_int(name, raw, low=1)
    return raw


# --- recipes ------------------------------------------------------------------------------------


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
    override = _given(environ, "LAUNCHER_RECIPES_DIR")
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
    return dict(value)


def _check_input_names(table: Mapping[str, str], where: str) -> None:
    for key in table:
        if key not in RECIPE_INPUTS:
            hint = _suggest(key, RECIPE_INPUTS)
            msg = f"{where}: {key} is not an input a recipe may set ({', '.join(RECIPE_INPUTS)}).{hint}"
            raise LauncherError(msg)


def load_recipe(name: str, directory: Path) -> Recipe:
    path = directory / f"{name}.toml"
    if not path.is_file():
        known = recipe_names(directory)
        msg = (f"unknown recipe {name!r}: set RECIPE or --recipe to one of {', '.join(known) or '(none)'} "
               f"in {directory}.{_suggest(name, known)}")  # fmt: skip
        raise LauncherError(msg)
    try:
        with path.open("rb") as stream:
            data = tomllib.load(stream)
    except (OSError, tomllib.TOMLDecodeError) as error:
        msg = f"{path}: cannot read the recipe ({error}): fix the file"
        raise LauncherError(msg) from error
    keys = ("description", "serve_flags", "inputs", "env", "variants")
    for key in data:
        if key not in keys:
            msg = f"{path}: unknown key {key!r} (known: {', '.join(keys)}).{_suggest(key, keys)}"
            raise LauncherError(msg)

    flags = data.get("serve_flags", [])
    if not isinstance(flags, list) or not all(isinstance(flag, str) for flag in flags):
        msg = f"{path}: serve_flags must be an array of strings, one per argv element"
        raise LauncherError(msg)
    for flag in flags:
        if flag.split("=", 1)[0] in MANAGED_FLAGS:
            msg = f"{path}: serve_flags has {flag}, which the launcher sets itself: remove it from the recipe"
            raise LauncherError(msg)

    inputs = _string_table(data.get("inputs", {}), f"{path} [inputs]")
    _check_input_names(inputs, f"{path} [inputs]")
    env = _string_table(data.get("env", {}), f"{path} [env]")
    for key in env:
        if key in _SPECS:
            msg = f"{path} [env]: {key} is a launcher input: move it to [inputs] (or a variant)"
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


# --- the plan: everything decided before a process starts --------------------------------------


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    recipe: Recipe
    variant: str | None  # the variant these inputs are (chosen, or matched), None if none matches
    inputs: Inputs
    env: Mapping[str, str]  # what the launcher sets for vLLM and the benchmark (effective values)
    overridden: Mapping[str, str]  # recipe env key -> the recipe value a submit-time value replaced
    argv: tuple[str, ...]
    benchmark: tuple[str, ...]
    log_dir: Path
    ready_timeout_s: float
    stop_grace_s: float

    @property
    def log_file(self) -> Path:
        return self.log_dir / f"vllm-node{self.inputs.node_rank}.log"

    @property
    def sentinel(self) -> Path:
        return self.log_dir / SENTINEL_NAME


def log_dir_for(environ: Mapping[str, str]) -> Path:
    root = _given(environ, "LOG_ROOT") or _SPECS["LOG_ROOT"].default
    return Path(root) / (_given(environ, "SLURM_JOB_ID") or "local")


def select_variant(recipe: Recipe, name: str, environ: Mapping[str, str]) -> Mapping[str, str]:
    """The inputs a chosen variant sets. A submit-time value that contradicts an explicit choice is an
    error: silently running a different configuration than the one named is worse than stopping."""
    if not name:
        return {}
    if name not in recipe.variants:
        known = sorted(recipe.variants)
        msg = (f"recipe {recipe.name!r} has no variant {name!r}: set VARIANT or --variant to one of "
               f"{', '.join(known) or '(none)'}.{_suggest(name, known)}")  # fmt: skip
        raise LauncherError(msg)
    settings = recipe.variants[name]
    for key, value in settings.items():
        given = _given(environ, key)
        if given and normalize_input(key, given) != normalize_input(key, value):
            msg = (f"{key}={given} contradicts variant {name!r} ({key}={value}): "
                   f"unset {key} or choose another VARIANT")  # fmt: skip
            raise LauncherError(msg)
    return settings


def resolve_inputs(
    environ: Mapping[str, str], recipe: Recipe, variant: Mapping[str, str], extra_args: Sequence[str]
) -> Inputs:
    def get(name: str) -> str:
        # Submit-time environment, then the variant, then the recipe, then the launcher default.
        return _given(environ, name) or variant.get(name) or recipe.inputs.get(name) or _SPECS[name].default

    model_path = get("MODEL_PATH")
    if not model_path:
        msg = "MODEL_PATH is not set: export MODEL_PATH=<model directory as mounted on the node>"
        raise LauncherError(msg)
    nnodes = parse_int("NNODES", get("NNODES"), low=1)
    gpus_per_node = parse_int("GPUS_PER_NODE", get("GPUS_PER_NODE"), low=1)
    tp_size = parse_int("TP_SIZE", get("TP_SIZE") or str(gpus_per_node), low=1)
    pp_size = parse_int("PP_SIZE", get("PP_SIZE") or str(nnodes), low=1)
    if tp_size * pp_size != nnodes * gpus_per_node:
        msg = (f"topology mismatch: TP_SIZE x PP_SIZE = {tp_size} x {pp_size} = {tp_size * pp_size} GPUs, "
               f"but NNODES x GPUS_PER_NODE = {nnodes} x {gpus_per_node} = {nnodes * gpus_per_node}: "
               "set TP_SIZE, PP_SIZE, NNODES or GPUS_PER_NODE so they agree")  # fmt: skip
        raise LauncherError(msg)
    node_rank = parse_int("NODE_RANK", get("NODE_RANK"), low=0, high=nnodes - 1)
    master_addr = get("MASTER_ADDR")
    if not master_addr:
        if nnodes > 1:
            msg = f"MASTER_ADDR is not set and NNODES={nnodes}: export MASTER_ADDR=<head node address>"
            raise LauncherError(msg)
        master_addr = "127.0.0.1"
    enable_ep = parse_bool("ENABLE_EP", get("ENABLE_EP"))
    backend = parse_backend(get("ALL2ALL_BACKEND"))
    if backend is not None and not enable_ep:
        msg = f"ALL2ALL_BACKEND={backend} needs expert parallelism: set ENABLE_EP=1 or ALL2ALL_BACKEND=none"
        raise LauncherError(msg)
    return Inputs(
        model_path=model_path,
        served_name=get("MODEL_NAME") or Path(model_path.rstrip("/")).name or model_path,
        node_rank=node_rank,
        nnodes=nnodes,
        master_addr=master_addr,
        master_port=parse_int("MASTER_PORT", get("MASTER_PORT"), low=1, high=65535),
        serve_port=parse_int("SERVE_PORT", get("SERVE_PORT"), low=1, high=65535),
        gpus_per_node=gpus_per_node,
        tp_size=tp_size,
        pp_size=pp_size,
        enable_ep=enable_ep,
        all2all_backend=backend,
        extra_args=split_command("EXTRA_SERVE_ARGS", get("EXTRA_SERVE_ARGS")) + tuple(extra_args),
    )


def build_argv(inputs: Inputs, env: Mapping[str, str], serve_flags: Sequence[str]) -> tuple[str, ...]:
    """The vLLM command line, in the order the cluster scripts documented. Pure."""
    timeout = env["DISTRIBUTED_TIMEOUT_SECONDS"]
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
        "--distributed-timeout-seconds", timeout,
        "--cpu-distributed-timeout-seconds", timeout,
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


def resolve_plan(
    environ: Mapping[str, str],
    *,
    recipe_name: str | None = None,
    variant_name: str | None = None,
    extra_args: Sequence[str] = (),
) -> Plan:
    """Decide everything from the environment and the recipe; starts nothing, writes nothing."""
    recipe_name = recipe_name or _given(environ, "RECIPE") or _SPECS["RECIPE"].default
    recipe = load_recipe(recipe_name, recipes_dir(environ))
    chosen = variant_name or _given(environ, "VARIANT")
    inputs = resolve_inputs(environ, recipe, select_variant(recipe, chosen, environ), extra_args)
    current = inputs.recipe_settable()
    variant = chosen or next(
        (name for name, settings in recipe.variants.items()
         if all(normalize_input(key, value) == current[key] for key, value in settings.items())),
        None,
    )  # fmt: skip

    env: dict[str, str] = {}
    overridden: dict[str, str] = {}
    for key, value in recipe.env.items():
        given = _given(environ, key)
        env[key] = given or value
        if given and given != value:
            overridden[key] = value
    # Variables that become vLLM flags count when set at submit time even if the recipe lacks them.
    for key in (*REQUIRED_ENV_FLAGS, *(variable for variable, _ in OPTIONAL_ENV_FLAGS)):
        if key not in env and _given(environ, key):
            env[key] = _given(environ, key)
    for key in REQUIRED_ENV_FLAGS:
        if key not in env:
            msg = f"{key} is not set: give it in the recipe's [env] ({recipe.path}) or at submit time"
            raise LauncherError(msg)
    parse_float("GPU_MEMORY_UTILIZATION", env["GPU_MEMORY_UTILIZATION"], high=1.0)
    parse_int("DISTRIBUTED_TIMEOUT_SECONDS", env["DISTRIBUTED_TIMEOUT_SECONDS"], low=1)
    # The benchmark must request the name vLLM serves: a mismatch made every request 404.
    env["SERVED_MODEL_NAME"] = inputs.served_name
    env["NIAH_MODEL"] = inputs.served_name
    env["SERVE_PORT"] = str(inputs.serve_port)
    # Python buffers a pipe in blocks; line by line, the readiness line and the log tail are current.
    env["PYTHONUNBUFFERED"] = _given(environ, "PYTHONUNBUFFERED") or "1"

    timeout_name = "READY_TIMEOUT_S" if _given(environ, "READY_TIMEOUT_S") else "VLLM_ENGINE_READY_TIMEOUT_S"
    timeout_raw = _given(environ, "READY_TIMEOUT_S") or env.get("VLLM_ENGINE_READY_TIMEOUT_S") or "3600"
    return Plan(
        recipe=recipe,
        variant=variant,
        inputs=inputs,
        env=env,
        overridden=overridden,
        argv=build_argv(inputs, env, recipe.serve_flags),
        benchmark=split_command("BENCHMARK_CMD", _given(environ, "BENCHMARK_CMD")),
        log_dir=log_dir_for(environ),
        ready_timeout_s=parse_float(timeout_name, timeout_raw),
        stop_grace_s=parse_float("STOP_GRACE_S", _given(environ, "STOP_GRACE_S") or "10"),
    )


def render_text(plan: Plan) -> str:
    """What a node would run, for people: env, then argv one token per line between markers."""
    inputs = plan.inputs
    role = "head" if inputs.is_head else "worker"
    lines = [
        f"# recipe {plan.recipe.name} ({plan.recipe.path}), variant {plan.variant or '(none matches)'}",
        f"# node {inputs.node_rank} of {inputs.nnodes} ({role}), TP {inputs.tp_size} x PP {inputs.pp_size}, "
        f"log {plan.log_file}",
        "--- env ---",
    ]
    for key, value in plan.env.items():
        if key in plan.overridden:
            lines.append(f"# {key}: the submit-time value wins over the recipe's {plan.overridden[key]}")
        lines.append(f"{key}={shlex.quote(value)}")
    lines += ["--- end env ---", "--- argv ---", *plan.argv, "--- end argv ---"]
    if inputs.is_head:
        benchmark = shlex.join(plan.benchmark) if plan.benchmark else "none, wait for vLLM to exit"
        lines.append(f"# benchmark: {benchmark}")
    return "\n".join(lines) + "\n"


def render_json(plan: Plan) -> str:
    inputs = plan.inputs
    document = {
        "recipe": plan.recipe.name,
        "recipe_file": str(plan.recipe.path),
        "variant": plan.variant,
        "role": "head" if inputs.is_head else "worker",
        "node_rank": inputs.node_rank,
        "nnodes": inputs.nnodes,
        "served_model_name": inputs.served_name,
        "env": dict(plan.env),
        "overridden_recipe_env": dict(plan.overridden),
        "argv": list(plan.argv),
        "benchmark": list(plan.benchmark),
        "log_file": str(plan.log_file),
        "sentinel": str(plan.sentinel),
        "ready_timeout_s": plan.ready_timeout_s,
    }
    return json.dumps(document, indent=2) + "\n"


# --- running: processes, readiness, teardown ---------------------------------------------------


def say(message: str) -> None:
    """Launcher progress on stderr; stdout carries vLLM's output and dry-run data."""
    print(f"[serve] {message}", file=sys.stderr, flush=True)


class Child:
    """A command in its own session, so stopping it reaches every process it spawned (vLLM's workers).
    With tee_to, its output goes line by line to the console, the file and a tail kept for errors."""

    def __init__(self, proc: subprocess.Popen[bytes], *, marker: str, log: IO[bytes] | None) -> None:
        self.proc = proc
        self.marker = marker
        self.marker_seen = threading.Event()
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._log = log
        self._pump: threading.Thread | None = None
        if proc.stdout is not None and log is not None:
            self._pump = threading.Thread(target=self._copy, args=(proc.stdout, log), daemon=True)
            self._pump.start()

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        what: str,
        tee_to: Path | None = None,
        marker: str = "",
    ) -> Child:
        executable = shutil.which(argv[0], path=env.get("PATH"))
        if executable is None:
            msg = f"{what}: {argv[0]} is not on PATH ({env.get('PATH')}): run inside the image or fix PATH"
            raise LauncherError(msg)
        log = tee_to.open("ab") if tee_to is not None else None
        try:
            proc = subprocess.Popen(
                list(argv),
                executable=executable,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if log else None,
                stderr=subprocess.STDOUT if log else None,
                start_new_session=True,
            )
        except OSError as error:
            if log is not None:
                log.close()
            msg = f"{what}: cannot start {executable} ({error})"
            raise LauncherError(msg) from error
        return cls(proc, marker=marker, log=log)

    def _copy(self, stream: IO[bytes], log: IO[bytes]) -> None:
        console = sys.stdout.buffer
        for line in iter(stream.readline, b""):
            with contextlib.suppress(OSError, ValueError):  # a closed console must not stop the log
                console.write(line)
                console.flush()
            log.write(line)
            log.flush()
            text = line.decode(errors="replace").rstrip()
            self._tail.append(text)
            if self.marker and self.marker in text:
                self.marker_seen.set()
        stream.close()

    def poll(self) -> int | None:
        return self.proc.poll()

    def tail(self) -> str:
        return "\n".join(self._tail)

    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)

    def group_alive(self) -> bool:
        """Whether any process of the group still runs; zombies do not count (see group_running)."""
        if self.proc.poll() is not None:
            # When the launcher is PID 1 of a container, orphaned workers are re-parented to it and
            # stay zombies until reaped here.
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-self.proc.pid, os.WNOHANG)[0]:
                    pass
        return group_running(self.proc.pid)

    def close(self) -> None:
        """After the group is gone: let the copier drain the pipe, then close the log."""
        if self._pump is not None:
            self._pump.join(timeout=2.0)
        drained = self._pump is None or not self._pump.is_alive()
        if self._log is not None and drained:
            self._log.close()


def group_running(pgid: int) -> bool:
    """Whether process group pgid has a member that is not a zombie. Orphaned members are reaped by
    PID 1 in its own time, and killpg(pgid, 0) succeeds until then, so on Linux /proc decides."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            state, _ppid, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue  # the process ended while we looked
        if group == str(pgid) and state != "Z":
            return True
    return False


def stop_all(children: Sequence[Child], grace_s: float) -> None:
    """SIGTERM every child's group, SIGKILL what is left after grace_s. Idempotent."""
    for child in children:
        child.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(child.group_alive() for child in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    for child in children:
        if child.group_alive():
            say(f"process group {child.proc.pid} ignored SIGTERM for {grace_s:g} s: SIGKILL")
            child.signal_group(signal.SIGKILL)
    for child in children:
        child.proc.wait()
        kill_deadline = time.monotonic() + 2.0
        while child.group_alive() and time.monotonic() < kill_deadline:
            time.sleep(0.05)
        child.close()


def raise_sentinel(path: Path) -> None:
    """Tell the workers to stop. Idempotent: the first reason written stays."""
    try:
        if path.exists():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"raised by the head, pid {os.getpid()}, at {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
    except OSError as error:
        say(f"could not raise the shutdown sentinel {path} ({error}): workers will not stop on their own")


def probe_health(port: int) -> bool:
    """GET /health on the loopback, bypassing any *_proxy variables, which would send it off the node."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://127.0.0.1:{port}/health", timeout=1.0) as response:
            return bool(response.status == 200)
    except (OSError, http.client.HTTPException):
        return False


def _vllm_failed(server: Child, plan: Plan, what: str) -> LauncherError:
    # Stop first: vLLM's workers hold the pipe open, and the tail is complete only once they are gone.
    stop_all([server], plan.stop_grace_s)
    return LauncherError(
        f"vLLM {what}; full log: {plan.log_file}",
        exit_code=1,
        detail=f"--- last {TAIL_LINES} lines of vLLM output ---\n{server.tail()}",
    )


def wait_until_ready(server: Child, plan: Plan) -> None:
    deadline = time.monotonic() + plan.ready_timeout_s
    while not (server.marker_seen.is_set() or probe_health(plan.inputs.serve_port)):
        code = server.poll()
        if code is not None:
            raise _vllm_failed(server, plan, f"exited with code {code} before it was ready")
        if time.monotonic() >= deadline:
            what = f"was not ready after {plan.ready_timeout_s:g} s: read the log or raise READY_TIMEOUT_S"
            raise _vllm_failed(server, plan, what)
        server.marker_seen.wait(POLL_S)


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Turn the first termination signal into a LauncherError, so every `finally` runs: the sentinel is
    raised and vLLM stopped. Teardown ignores further signals (see _teardown)."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        msg = f"received {signal.Signals(signum).name}: stopped"
        raise LauncherError(msg, exit_code=128 + signum)

    previous = {signum: signal.signal(signum, handler) for signum in HANDLED_SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def _teardown(plan: Plan, children: Sequence[Child]) -> None:
    # A second SIGTERM (Slurm signals every process of the step) must not cut teardown short.
    for signum in HANDLED_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    if plan.inputs.is_head:
        raise_sentinel(plan.sentinel)  # first, so the workers stop while this node does
    stop_all(children, plan.stop_grace_s)


def run_head(plan: Plan, env: Mapping[str, str]) -> int:
    # A sentinel left by an earlier run in the same log directory would stop the workers at once.
    plan.sentinel.unlink(missing_ok=True)
    children: list[Child] = []
    try:
        server = Child.start(plan.argv, env, what="vllm", tee_to=plan.log_file, marker=READY_MARKER)
        children.append(server)
        wait_until_ready(server, plan)
        name = plan.inputs.served_name
        say(f"vLLM is ready on port {plan.inputs.serve_port}: SERVED_MODEL_NAME={name} NIAH_MODEL={name}")
        if not plan.benchmark:
            vllm_code = server.proc.wait()
            if vllm_code != 0:
                raise _vllm_failed(server, plan, f"exited with code {vllm_code}")
            return 0
        benchmark = Child.start(plan.benchmark, env, what="BENCHMARK_CMD")
        children.insert(0, benchmark)
        while (code := benchmark.poll()) is None:
            died = server.poll()
            if died is not None:
                raise _vllm_failed(server, plan, f"exited with code {died} while the benchmark ran")
            time.sleep(POLL_S)
        if code != 0:
            msg = f"BENCHMARK_CMD exited with code {code}: see its output above"
            raise LauncherError(msg, exit_code=1)
        say("benchmark finished: stopping vLLM")
        return 0
    finally:
        _teardown(plan, children)


def run_worker(plan: Plan, env: Mapping[str, str]) -> int:
    if plan.sentinel.exists():
        say(f"the head already raised {plan.sentinel}: not starting vLLM")
        return 0
    children: list[Child] = []
    try:
        server = Child.start(plan.argv, env, what="vllm", tee_to=plan.log_file)
        children.append(server)
        while not plan.sentinel.exists():
            code = server.poll()
            if code == 0:
                return 0
            if code is not None:
                raise _vllm_failed(server, plan, f"exited with code {code}")
            time.sleep(POLL_S)
        say(f"the head raised {plan.sentinel}: stopping vLLM")
        return 0
    finally:
        _teardown(plan, children)


def run_node(plan: Plan, environ: Mapping[str, str]) -> int:
    model = plan.inputs.model_path
    if model.startswith("/") and not Path(model).exists():
        msg = f"MODEL_PATH={model} does not exist on this node: mount the model there or fix MODEL_PATH"
        raise LauncherError(msg)
    try:
        plan.log_dir.mkdir(parents=True, exist_ok=True)
        with plan.log_file.open("a") as log:
            log.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%S%z')} serve.py: {shlex.join(plan.argv)}\n")
    except OSError as error:
        msg = f"cannot write the log {plan.log_file} ({error}): set LOG_ROOT to a writable shared directory"
        raise LauncherError(msg) from error
    env = {**environ, **plan.env}
    return run_head(plan, env) if plan.inputs.is_head else run_worker(plan, env)


# --- command line -------------------------------------------------------------------------------


def _help_epilog(environ: Mapping[str, str]) -> str:
    lines = ["inputs (environment variables; a value set at submit time wins over the recipe):"]
    for spec in INPUTS:
        default = f" [{spec.default}]" if spec.default else ""
        lines.append(f"  {spec.name:<21} {spec.help}{default}")
    directory = recipes_dir(environ)
    lines += ["", f"recipes (in {directory}):"]
    for name in recipe_names(directory):
        try:
            recipe = load_recipe(name, directory)
        except LauncherError as error:
            lines.append(f"  {name:<21} cannot be read: {error}")
            continue
        lines.append(f"  {name:<21} {recipe.description}")
        for variant, settings in recipe.variants.items():
            values = " ".join(f"{key}={value}" for key, value in settings.items())
            lines.append(f"    --variant {variant:<11} {values}")
    lines += [
        "",
        "Extra vLLM flags may also follow `--` on the command line; they come after EXTRA_SERVE_ARGS.",
        "exit status: 0 done, 1 vLLM or the benchmark failed or timed out, 2 bad input, 128+N on signal N.",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[argparse.Namespace, list[str]]:
    """The launcher's own options, and the extra vLLM flags after the first `--`."""
    own, extra = list(argv), []
    if "--" in own:
        cut = own.index("--")
        own, extra = own[:cut], own[cut + 1 :]
    parser = argparse.ArgumentParser(
        prog="serve.py",
        description=(__doc__ or "").split("\n\n")[1],
        epilog=_help_epilog(environ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--recipe", help="recipe name (env RECIPE, default kimi-k3)")
    parser.add_argument("--variant", help="variant of the recipe (env VARIANT)")
    parser.add_argument("--dry-run", action="store_true", help="print env, argv; start nothing (DRY_RUN=1)")
    parser.add_argument("--json", action="store_true", help="dry run, printed as JSON for machines")
    return parser.parse_args(own), extra


def _is_head_rank(environ: Mapping[str, str]) -> bool:
    try:
        return int(_given(environ, "NODE_RANK") or "0") == HEAD_RANK
    except ValueError:
        return False


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """The one exit point: every LauncherError becomes its message on stderr and its exit code."""
    environ = dict(os.environ if environ is None else environ)
    options, extra = parse_args(sys.argv[1:] if argv is None else argv, environ)
    try:
        return _main(options, extra, environ)
    except LauncherError as error:
        print(f"serve: error: {error}", file=sys.stderr)
        if error.detail:
            print(error.detail, file=sys.stderr)
        return error.exit_code


def _main(options: argparse.Namespace, extra: Sequence[str], environ: Mapping[str, str]) -> int:
    def plan() -> Plan:
        return resolve_plan(
            environ, recipe_name=options.recipe, variant_name=options.variant, extra_args=extra
        )

    if options.dry_run or options.json or parse_bool("DRY_RUN", _given(environ, "DRY_RUN")):
        sys.stdout.write(render_json(plan()) if options.json else render_text(plan()))
        return 0
    with signals_raise():
        try:
            resolved = plan()
            sys.stderr.write(render_text(resolved))
            return run_node(resolved, environ)
        finally:
            # Also when the plan itself failed: the workers must not wait for a head that never serves.
            if _is_head_rank(environ):
                raise_sentinel(log_dir_for(environ) / SENTINEL_NAME)


if __name__ == "__main__":
    sys.exit(main())
