"""The command line: parse the launcher's own options, plan, then dry-run or run; the one exit point."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from .flags import ENV_FLAG_HELP
from .inputs import GROUPS, HEAD_RANK, INPUTS
from .messages import LauncherError
from .node import run_node
from .plan import Plan, log_dir_for, resolve_plan
from .process import signals_raise
from .recipes import load_recipe, recipe_names, recipes_dir
from .render import render_json, render_start, render_text
from .sentinel import SENTINEL_NAME, raise_sentinel
from .values import given, parse_bool

DESCRIPTION = """\
Start one node of a multi-node vLLM deployment from a model recipe.

Every node of a job runs this program. Node 0 (the head) serves the API, waits until vLLM is ready,
runs the benchmark and, however it exits, raises a shutdown sentinel on the shared log volume; the
other nodes run `vllm serve --headless` and stop when the sentinel appears. Before vLLM starts, every
node removes stale JIT locks and waits at a container barrier until all nodes are up. Configuration
comes from environment variables (the names the cluster scripts already use) and one TOML recipe per
model. Runs on the image's python3 with the standard library only."""


def _help_epilog(environ: Mapping[str, str]) -> str:
    width = max(len(name) for name in (*(spec.name for spec in INPUTS), *(name for name, _ in ENV_FLAG_HELP)))
    lines = ["inputs (environment variables; a value set at submit time wins over the recipe):"]
    for group, title in GROUPS.items():
        lines.append(f" {title}:")
        for spec in (spec for spec in INPUTS if spec.group == group):
            default = f" [{spec.default}]" if spec.default else ""
            lines.append(f"  {spec.name:<{width}} {spec.help}{default}")
    lines.append(" recipe [env] variables that also become vLLM flags (a submit-time value wins):")
    lines += [f"  {name:<{width}} {text}" for name, text in ENV_FLAG_HELP]
    directory = recipes_dir(environ)
    lines += ["", f"recipes (in {directory}):"]
    for name in recipe_names(directory):
        try:
            recipe = load_recipe(name, directory)
        except LauncherError as error:
            lines.append(f"  {name:<{width}} cannot be read: {error}")
            continue
        lines.append(f"  {name:<{width}} {recipe.description}")
        for variant, settings in recipe.variants.items():
            values = " ".join(f"{key}={value}" for key, value in settings.items())
            lines.append(f"    --variant {variant:<11} {values}")
    lines += [
        "",
        "Extra vLLM flags may also follow `--` on the command line; they come after EXTRA_SERVE_ARGS.",
        "The dry run prints the argv between ===DRYRUN ...=== and ===END=== lines, one element per line.",
        "exit status: 0 done, 1 vLLM, the benchmark or the barrier failed or timed out, 2 bad input,",
        "128+N stopped by signal N.",
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
        description=DESCRIPTION,
        epilog=_help_epilog(environ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--recipe", help="recipe name (env RECIPE, default kimi-k3)")
    parser.add_argument("--variant", help="variant of the recipe (env VARIANT)")
    parser.add_argument("--dry-run", action="store_true", help="print env, argv; start nothing (DRY_RUN=1)")
    parser.add_argument("--json", action="store_true", help="dry run, printed as JSON for machines")
    return parser.parse_args(own), extra


def _head_sentinel(environ: Mapping[str, str]) -> Path | None:
    """Where the head raises the sentinel even when its plan failed, so the workers do not wait for a
    head that never serves; None on a worker or when the inputs do not name a safe log directory."""
    rank = given(environ, "NODE_RANK") or given(environ, "SLURM_NODEID") or str(HEAD_RANK)
    try:
        if int(rank) != HEAD_RANK:
            return None
        return log_dir_for(environ) / SENTINEL_NAME
    except (ValueError, LauncherError):
        return None


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

    if options.dry_run or options.json or parse_bool("DRY_RUN", given(environ, "DRY_RUN")):
        sys.stdout.write(render_json(plan()) if options.json else render_text(plan()))
        return 0
    with signals_raise():
        try:
            resolved = plan()
            sys.stderr.write(render_start(resolved))
            return run_node(resolved, environ)
        finally:
            sentinel = _head_sentinel(environ)
            if sentinel is not None:
                raise_sentinel(sentinel)
