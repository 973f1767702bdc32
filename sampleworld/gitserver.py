"""The sample git daemon: serves the stand-in repositories at git://127.0.0.1:55418/<owner>/<name>.git."""

from __future__ import annotations

import json

from sampleworld import gitrepos, log
from sampleworld.layout import HOST, PORTS, StateDir
from sampleworld.services import Service


def service(state: StateDir) -> Service:
    return Service(
        name="git-daemon",
        port=PORTS.git,
        argv=(
            "git",
            "daemon",
            "--export-all",
            f"--base-path={state.git}",
            f"--listen={HOST}",
            f"--port={PORTS.git}",
            "--reuseaddr",
            "--informative-errors",
            str(state.git),
        ),
        marker=f"--base-path={state.git}",
    )


def ensure_repos(state: StateDir) -> dict[str, dict[str, str]]:
    """Build the repositories unless the ones on disk came from the same sources; returns their refs."""
    stamp = state.git / "fingerprint.json"
    wanted = gitrepos.fingerprint()
    try:
        recorded = json.loads(stamp.read_text())
        if recorded["fingerprint"] == wanted:
            refs: dict[str, dict[str, str]] = recorded["refs"]
            return refs
    except (OSError, ValueError, KeyError):
        pass
    with log.step("git: writing the stand-in repositories"):
        refs = gitrepos.build_repos(state.git)
    stamp.write_text(json.dumps({"fingerprint": wanted, "refs": refs}, indent=2, sort_keys=True) + "\n")
    return refs
