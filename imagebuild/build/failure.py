"""What a failed build says: the step, its title and pins, the log tail, and a hint where one is known.

A step that cannot reach a service on the build machine's loopback ("Connection refused" to
127.0.0.1 or localhost, curl's "unable to connect to 127.0.0.1", pip's "Connection refused" retrying an index on 127.0.0.1) ran in the build's own network
namespace, where 127.0.0.1 is the container itself: the hint is ``--network host``, which the
sample world (and any source served on the build machine) needs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from imagebuild.build.stream import StepTracker
from imagebuild.project import Inputs
from imagebuild.render import Dockerfile

LOOPBACK = r"(?:127\.\d+\.\d+\.\d+|localhost|\[::1\]|::1)"
REFUSED_LOOPBACK_RE = re.compile(
    rf"connection refused.*{LOOPBACK}|{LOOPBACK}.*connection refused|unable to connect to {LOOPBACK}",
    re.IGNORECASE,
)
HOST_NETWORK = "host"
LOOPBACK_HINT = (
    "a step could not connect to this machine's loopback (127.0.0.1), which inside the build is the "
    "container's own; if the source is served on this machine, build with --network host"
)


REFUSED_RE = re.compile(r"connection refused|errno 111\b|econnrefused", re.IGNORECASE)
LOOPBACK_ADDRESS_RE = re.compile(rf"(?:^|[/@\s'\"(=]){LOOPBACK}(?::\d+)?(?:[/\s'\")]|$)", re.IGNORECASE)


def refused_loopback(lines: Iterable[str]) -> bool:
    """Whether the lines show a connection to 127.0.0.1 / localhost refused.

    Either on one line (git: "unable to connect to 127.0.0.1"), or a refusal on one line and the
    loopback address on another, as pip says it ("Looking in indexes: http://127.0.0.1:55080/simple/",
    then "Failed to establish a new connection: [Errno 111] Connection refused").
    """
    seen = list(lines)
    if any(REFUSED_LOOPBACK_RE.search(line) for line in seen):
        return True
    return any(REFUSED_RE.search(line) for line in seen) and any(
        LOOPBACK_ADDRESS_RE.search(line) for line in seen
    )


def where(dockerfile: Dockerfile, inputs: Inputs, tracker: StepTracker, what: str) -> str:
    """'step 7/18 'vLLM ...' failed (stages/07-vllm.toml; pins: vllm = ...)', or where before the steps."""
    step = next((s for s in dockerfile.steps if s.number == tracker.current), None)
    if step is None:
        return f"the build {what} before the final stage (donor image or base image)"
    pins = ", ".join(f"{p} = {inputs.pins.get(p).identity or 'unpinned'}" for p in step.pins) or "none"
    return f"step {step.number}/{len(dockerfile.steps)} '{step.title}' {what} ({step.source}; pins: {pins})"


def failure_message(
    dockerfile: Dockerfile,
    inputs: Inputs,
    tracker: StepTracker,
    error: str,
    log_path: Path,
    *,
    network: str | None = None,
) -> str:
    """The first line says what failed and, where known, what to do; then the log tail."""
    hint = ""
    if network != HOST_NETWORK and refused_loopback([error, *tracker.tail]):
        hint = f"; {LOOPBACK_HINT}"
    tail = "\n".join(f"  | {line}" for line in tracker.tail)
    return (
        f"{where(dockerfile, inputs, tracker, 'failed')}: {error}{hint}\n"
        f"last {len(tracker.tail)} lines of the build log:\n{tail}\nfull log: {log_path}; nothing was tagged"
    )
