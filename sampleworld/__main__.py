"""python -m sampleworld up|down|status|save-lock [--state DIR]
python -m sampleworld cluster up|down|status [--state DIR]
python -m sampleworld engines up|down|status [--state DIR]   (JSON on stdout: the engine matrix)"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sampleworld.errors import SampleWorldError
from sampleworld.layout import DEFAULT_STATE_DIR
from sampleworld.world import down, load, save_lock, status, up

WORLD_COMMANDS = ("up", "down", "status", "save-lock")
CLUSTER_ACTIONS = ("up", "down", "status")


def _world(args: argparse.Namespace) -> int:
    if args.command == "up":
        # stdout carries data: the World as JSON, for scripts.
        sys.stdout.write(up(args.state, images=not args.no_images).to_json())
    elif args.command == "save-lock":
        # After `imagebuild lock --pins <state>/pins.toml`: keep its python lock, with the default ports.
        print(f"wrote {save_lock(args.state)}")
    elif args.command == "down":
        stopped = down(args.state)
        print("stopped: " + (", ".join(stopped) or "nothing (none of ours was running)"))
    else:
        for name, pid in status(args.state).items():
            print(f"{name}: {'running, pid ' + str(pid) if pid else 'stopped'}")
        try:
            world = load(args.state)
        except SampleWorldError:
            return 0
        print(f"index: {world.simple_url}\ngit: {world.git_url}\nregistry: {world.registry}")
        print(f"images: {world.base_image}\n        {world.donor_image}\npins: {world.pins_path}")
    return 0


def _cluster(args: argparse.Namespace) -> int:
    from sampleworld import cluster

    if args.action == "up":
        sys.stdout.write(cluster.up(args.state).to_json())
    elif args.action == "down":
        stopped = cluster.down(args.state)
        print("stopped: " + (", ".join(stopped) or "nothing (none of ours was running)"))
    else:
        for name, pid in cluster.status(args.state).items():
            print(f"{name}: {'running, pid ' + str(pid) if pid else 'stopped'}")
        try:
            loaded = cluster.load(args.state)
        except SampleWorldError:
            return 0
        print(f"export SLURM_CONF={loaded.conf}")
        for node, host in loaded.engines.items():
            print(f"{node}: DOCKER_HOST={host}")
    return 0


def _engines(args: argparse.Namespace) -> int:
    from sampleworld import engine_matrix

    if args.action == "up":
        rows, started = engine_matrix.up(args.state)
        report: dict[str, object] = {"engines": [row.to_dict() for row in rows], "started": started}
    elif args.action == "down":
        report = {"stopped": engine_matrix.down(args.state)}
    else:
        report = {
            "engines": [row.to_dict() for row in engine_matrix.status(args.state)],
            "disk_bytes": engine_matrix.disk_usage(args.state),
        }
    sys.stdout.write(json.dumps(report, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sampleworld", description=__doc__)
    parser.add_argument("command", choices=(*WORLD_COMMANDS, "cluster", "engines"))
    parser.add_argument(
        "action", nargs="?", choices=CLUSTER_ACTIONS, help="with `cluster` or `engines`: what to do with it"
    )
    parser.add_argument(
        "--state", type=Path, default=DEFAULT_STATE_DIR, help=f"state dir (default {DEFAULT_STATE_DIR})"
    )
    parser.add_argument("--no-images", action="store_true", help="up: skip Docker (no base or donor image)")
    args = parser.parse_args(argv)
    grouped = args.command in ("cluster", "engines")
    if grouped != (args.action is not None):
        parser.error(
            "`cluster` and `engines` take up, down or status; the world's commands take nothing after them"
        )
    try:
        if args.command == "engines":
            return _engines(args)
        return _cluster(args) if args.command == "cluster" else _world(args)
    except SampleWorldError as e:
        print(f"sampleworld: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
