"""The plan as text: the dry run in the reference's marker format, the JSON for machines, and the
header a real start writes. Pure functions of the plan.

Dry-run format (the reference's serve_colocated.sh, so its argv-assert tooling parses ours):

    # comment lines: recipe, variant, node, log file
    ===DRYRUN colocated role=head|worker NODE_RANK=<rank>===
    vllm
    serve
    <one argv element per line>
    ===END===
    ===ENV KEY=VALUE            one line per variable the launcher sets for vLLM
    ===BENCHMARK_ENV KEY=VALUE  the head only: what the benchmark gets on top
    # comment lines: overridden recipe values, barrier, benchmark, JIT cleanup

Readers take the lines between the DRYRUN and END markers; everything else is outside them.
Control characters are refused in every value, so one line is one element.
"""

from __future__ import annotations

import json
import shlex

from .plan import Plan

DRYRUN_BACKEND = "colocated"


def _role(plan: Plan) -> str:
    return "head" if plan.inputs.is_head else "worker"


def _summary(plan: Plan) -> list[str]:
    inputs = plan.inputs
    return [
        f"# recipe {plan.recipe.name} ({plan.recipe.path}), variant {plan.variant or '(none matches)'}",
        f"# node {inputs.node_rank} of {inputs.nnodes} ({_role(plan)}), TP {inputs.tp_size} x PP {inputs.pp_size}, "
        f"log {plan.log_file}",
    ]


def _notes(plan: Plan) -> list[str]:
    lines = [
        f"# {key}: the submit-time value wins over the recipe's {value}"
        for key, value in plan.overridden.items()
    ]
    if plan.barrier is not None:
        barrier = plan.barrier
        lines.append(f"# barrier: port {barrier.port}, head {barrier.head_addr}, timeout {barrier.timeout_s:g} s, "
                     f"nodes {barrier.describe(range(barrier.nnodes))}")  # fmt: skip
    if plan.inputs.is_head:
        benchmark = shlex.join(plan.benchmark) if plan.benchmark else "none, wait for vLLM to exit"
        lines.append(f"# benchmark: {benchmark}")
        if plan.results_file is not None:
            lines.append(f"# benchmark results: {plan.results_file} must exist afterwards")
    dirs = ", ".join(f"{lock_dir.owner} {lock_dir.path}" for lock_dir in plan.jit_lock_dirs)
    lines.append(f"# JIT locks older than {plan.jit_lock_stale_min:g} min are removed at start from: {dirs}")
    return lines


def render_text(plan: Plan) -> str:
    """The dry run, for people and for argv tooling."""
    lines = [
        *_summary(plan),
        f"===DRYRUN {DRYRUN_BACKEND} role={_role(plan)} NODE_RANK={plan.inputs.node_rank}===",
        *plan.argv,
        "===END===",
        *(f"===ENV {key}={value}" for key, value in plan.env.items()),
    ]
    if plan.inputs.is_head:
        lines += [f"===BENCHMARK_ENV {key}={value}" for key, value in plan.benchmark_env.items()]
    return "\n".join([*lines, *_notes(plan)]) + "\n"


def render_start(plan: Plan) -> str:
    """What a node is about to run, on stderr at a real start: no DRYRUN markers in a real log."""
    env = " ".join(f"{key}={shlex.quote(value)}" for key, value in plan.env.items())
    return (
        "\n".join([*_summary(plan), f"# env: {env}", f"# argv: {shlex.join(plan.argv)}", *_notes(plan)])
        + "\n"
    )


def render_json(plan: Plan) -> str:
    inputs = plan.inputs
    barrier = plan.barrier
    document = {
        "recipe": plan.recipe.name,
        "recipe_file": str(plan.recipe.path),
        "variant": plan.variant,
        "role": _role(plan),
        "node_rank": inputs.node_rank,
        "nnodes": inputs.nnodes,
        "master_addr": inputs.master_addr,
        "served_model_name": inputs.served_name,
        "env": dict(plan.env),
        "overridden_recipe_env": dict(plan.overridden),
        "argv": list(plan.argv),
        "benchmark": list(plan.benchmark),
        "benchmark_env": dict(plan.benchmark_env),
        "benchmark_results": str(plan.results_file) if plan.results_file else None,
        "log_file": str(plan.log_file),
        "sentinel": str(plan.sentinel),
        "ready_timeout_s": plan.ready_timeout_s,
        "barrier": None
        if barrier is None
        else {
            "port": barrier.port,
            "timeout_s": barrier.timeout_s,
            "head": barrier.head_addr,
            "addresses": list(barrier.addresses),
        },
        "jit_lock_dirs": {lock_dir.owner: str(lock_dir.path) for lock_dir in plan.jit_lock_dirs},
        "jit_lock_stale_min": plan.jit_lock_stale_min,
    }
    return json.dumps(document, indent=2) + "\n"
