"""The job's shape: how many nodes, which one this is, where the head is, what TP x PP spans.

Precedence for each value: given at submit time, then the SLURM allocation, then the recipe (or its
variant), then the launcher default. The allocation is checked against what the recipe needs before
anything starts: a 1-node allocation of a 2-node recipe is refused here, not 40 minutes into a
rendezvous that can never complete.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from .inputs import HEAD_RANK, SPECS
from .messages import LauncherError
from .slurm import Allocation, read_allocation
from .values import given, parse_address, parse_addresses, parse_int

LOOPBACK = "127.0.0.1"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Topology:
    nnodes: int
    node_rank: int
    master_addr: str
    addresses: tuple[str, ...]  # per rank, from IPADDRS or the SLURM hosts; () when unknown
    gpus_per_node: int
    tp_size: int
    pp_size: int


def _plural(count: int) -> str:
    return f"{count} node" if count == 1 else f"{count} nodes"


def _resolve_nnodes(
    environ: Mapping[str, str], alloc: Allocation, needed: int | None, recipe_name: str
) -> tuple[int, str]:
    """The node count and the variable it came from."""
    if given(environ, "NNODES"):
        nnodes = parse_int("NNODES", given(environ, "NNODES"), low=1)
        if alloc.nnodes is not None and nnodes > alloc.nnodes:
            msg = (f"NNODES={nnodes} but the SLURM allocation has {_plural(alloc.nnodes)} "
                   f"({alloc.nnodes_source}={alloc.nnodes}): submit with sbatch -N {nnodes} or lower NNODES")  # fmt: skip
            raise LauncherError(msg)
        return nnodes, "NNODES"
    if alloc.nnodes is not None:
        if needed is not None and alloc.nnodes < needed:
            msg = (f"the SLURM allocation has {_plural(alloc.nnodes)} ({alloc.nnodes_source}={alloc.nnodes}) "
                   f"but recipe {recipe_name} needs NNODES={needed}: submit with sbatch -N {needed}")  # fmt: skip
            raise LauncherError(msg)
        return alloc.nnodes, alloc.nnodes_source
    return needed or 1, "NNODES"


def _resolve_rank(environ: Mapping[str, str], alloc: Allocation, nnodes: int) -> int:
    if given(environ, "NODE_RANK"):
        return parse_int("NODE_RANK", given(environ, "NODE_RANK"), low=0, high=nnodes - 1)
    if alloc.node_id is not None:
        return parse_int("SLURM_NODEID", str(alloc.node_id), low=0, high=nnodes - 1)
    return HEAD_RANK


def _resolve_addresses(
    environ: Mapping[str, str], alloc: Allocation, nnodes: int
) -> tuple[str, tuple[str, ...]]:
    """The head's address and every node's, in rank order (() when unknown)."""
    ipaddrs = parse_addresses("IPADDRS", given(environ, "IPADDRS")) if given(environ, "IPADDRS") else ()
    if ipaddrs and len(ipaddrs) != nnodes:
        msg = (f"IPADDRS has {len(ipaddrs)} addresses but NNODES={nnodes}: give one address per node, "
               "comma-separated, in rank order")  # fmt: skip
        raise LauncherError(msg)
    hosts = alloc.hosts[:nnodes] if len(alloc.hosts) >= nnodes else ()
    addresses = ipaddrs or hosts
    if given(environ, "MASTER_ADDR"):
        return parse_address("MASTER_ADDR", given(environ, "MASTER_ADDR")), addresses
    if ipaddrs:
        return ipaddrs[HEAD_RANK], addresses
    if hosts:
        return parse_address("SLURM_JOB_NODELIST", hosts[HEAD_RANK]), addresses
    if nnodes == 1:
        return LOOPBACK, addresses
    msg = (f"MASTER_ADDR is not set and NNODES={nnodes}: export MASTER_ADDR=<head node address> "
           "(or IPADDRS, or run under SLURM with SLURM_JOB_NODELIST)")  # fmt: skip
    raise LauncherError(msg)


def resolve_topology(
    environ: Mapping[str, str], configured: Callable[[str], str], recipe_name: str
) -> Topology:
    """`configured(NAME)` is the variant's or recipe's value for NAME, "" when neither sets it."""
    alloc = read_allocation(environ)
    needed_raw = configured("NNODES")
    needed = parse_int("NNODES", needed_raw, low=1) if needed_raw else None
    nnodes, nnodes_source = _resolve_nnodes(environ, alloc, needed, recipe_name)

    def value(name: str, fallback: str) -> str:
        return given(environ, name) or configured(name) or fallback

    gpus = parse_int("GPUS_PER_NODE", value("GPUS_PER_NODE", SPECS["GPUS_PER_NODE"].default), low=1)
    tp_size = parse_int("TP_SIZE", value("TP_SIZE", str(gpus)), low=1)
    pp_size = parse_int("PP_SIZE", value("PP_SIZE", str(nnodes)), low=1)
    if tp_size * pp_size != nnodes * gpus:
        msg = (f"topology mismatch: TP_SIZE x PP_SIZE = {tp_size} x {pp_size} = {tp_size * pp_size} GPUs, "
               f"but NNODES x GPUS_PER_NODE = {nnodes} x {gpus} = {nnodes * gpus}"
               f"{'' if nnodes_source == 'NNODES' else f' (NNODES from {nnodes_source})'}: "
               "set TP_SIZE, PP_SIZE, NNODES or GPUS_PER_NODE so they agree")  # fmt: skip
        raise LauncherError(msg)
    node_rank = _resolve_rank(environ, alloc, nnodes)
    master_addr, addresses = _resolve_addresses(environ, alloc, nnodes)
    return Topology(
        nnodes=nnodes,
        node_rank=node_rank,
        master_addr=master_addr,
        addresses=addresses,
        gpus_per_node=gpus,
        tp_size=tp_size,
        pp_size=pp_size,
    )
