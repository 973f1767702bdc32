"""What the SLURM allocation says about the job: node count, this node's index, the hosts.

SLURM_JOB_NODELIST is a hostlist expression (`node[01-03,05],gpu7`); it is expanded here with the
standard library, because the image has no `scontrol`. The rules are Slurm's: commas outside brackets
separate hosts, a bracket holds comma-separated numbers and ranges, a range keeps the zero padding
of its lower bound, and several brackets in one name multiply out left to right.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Mapping

from .messages import LauncherError
from .values import given, parse_int

_RANGE_RE = re.compile(r"(\d+)(?:-(\d+))?")
# More than a cluster could ever allocate: a typo like node[1-1000000] must not eat memory.
MAX_HOSTS = 65536


@dataclasses.dataclass(frozen=True, kw_only=True)
class Allocation:
    nnodes: int | None  # None when no SLURM node count is set
    nnodes_source: str  # the variable nnodes came from, for messages
    node_id: int | None
    hosts: tuple[str, ...]  # SLURM_JOB_NODELIST expanded, in allocation order


def read_allocation(environ: Mapping[str, str]) -> Allocation:
    nnodes, source = None, ""
    for name in ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"):
        if given(environ, name):
            nnodes, source = parse_int(name, given(environ, name), low=1), name
            break
    node_id = given(environ, "SLURM_NODEID")
    nodelist = given(environ, "SLURM_JOB_NODELIST")
    return Allocation(
        nnodes=nnodes,
        nnodes_source=source,
        node_id=parse_int("SLURM_NODEID", node_id, low=0) if node_id else None,
        hosts=expand_hostlist(nodelist, name="SLURM_JOB_NODELIST") if nodelist else (),
    )


def _bad(name: str, raw: str, why: str) -> LauncherError:
    return LauncherError(f"{name}={raw!r} is not a SLURM hostlist ({why}): fix {name}")


def _split_top_level(raw: str, name: str) -> list[str]:
    """Split at commas outside brackets."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(raw):
        if char == "[":
            depth += 1
            if depth > 1:
                raise _bad(name, raw, "nested '['")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise _bad(name, raw, "']' without '['")
        elif char == "," and depth == 0:
            parts.append(raw[start:index])
            start = index + 1
    if depth:
        raise _bad(name, raw, "'[' without ']'")
    parts.append(raw[start:])
    return parts


def _numbers(inside: str, raw: str, name: str) -> list[str]:
    """`01-03,5` -> ['01', '02', '03', '5']."""
    numbers: list[str] = []
    for item in inside.split(","):
        match = _RANGE_RE.fullmatch(item.strip())
        if not match:
            raise _bad(name, raw, f"[{inside}] holds {item!r}, not a number or range")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise _bad(name, raw, f"range {item} runs backwards")
        if len(numbers) + int(high) - int(low) >= MAX_HOSTS:
            raise _bad(name, raw, f"more than {MAX_HOSTS} hosts")
        width = len(low)
        numbers += [str(value).zfill(width) for value in range(int(low), int(high) + 1)]
    return numbers


def _expand_one(expression: str, raw: str, name: str) -> list[str]:
    """`rack[1-2]-gpu[01-02]` -> rack1-gpu01, rack1-gpu02, rack2-gpu01, rack2-gpu02."""
    pieces: list[list[str]] = []
    rest = expression
    while "[" in rest:
        before, _, after = rest.partition("[")
        inside, _, rest = after.partition("]")
        pieces += [[before], _numbers(inside, raw, name)]
    pieces.append([rest])
    hosts = ["".join(combination) for combination in itertools.product(*pieces)]
    if len(hosts) > MAX_HOSTS:
        raise _bad(name, raw, f"more than {MAX_HOSTS} hosts")
    return hosts


def expand_hostlist(raw: str, *, name: str = "hostlist") -> tuple[str, ...]:
    """Every host of a SLURM hostlist expression, in order (as `scontrol show hostnames` prints them)."""
    if any(char.isspace() for char in raw):
        raise _bad(name, raw, "whitespace")
    hosts: list[str] = []
    for expression in _split_top_level(raw, name):
        if not expression or expression.startswith("["):
            raise _bad(name, raw, "an empty host name")
        hosts += _expand_one(expression, raw, name)
        if len(hosts) > MAX_HOSTS:
            raise _bad(name, raw, f"more than {MAX_HOSTS} hosts")
    return tuple(hosts)
