"""Container barrier: no node starts vLLM until every node's container is up.

vLLM's rendezvous gives each rank a bounded number of connect retries; a node whose container starts
late (a slow image pull on one node) makes the early ranks burn them against a dead port. So every
node meets here first. Only the head (rank 0) listens, so several "nodes" may share one host with host
networking; workers connect to MASTER_ADDR, say who they are, and wait for the head's verdict:
`go` once every rank is in, or `abort <line>` at the timeout, so every node ends with the same line
naming the nodes that never arrived. A late node within the timeout is simply counted. A worker that
cannot reach the head by the timeout names the head; a head that fails raises the shutdown sentinel,
which ends the waiting workers at once instead of at the timeout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import selectors
import socket
import time
from collections.abc import Callable, Iterable
from typing import cast

from .messages import EXIT_BAD_INPUT, EXIT_FAILED, LauncherError, say

PROTOCOL = "imagebuild-barrier/1"
POLL_S = 0.25
CONNECT_TIMEOUT_S = 2.0
RETRY_S = 0.5
MAX_LINE = 512
# A connected worker waits for the head's verdict; the head was up when the worker connected, so its
# own timeout bounds the wait. The grace covers the two clocks starting a moment apart.
VERDICT_GRACE_S = 30.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class BarrierSpec:
    port: int
    timeout_s: float
    nnodes: int
    rank: int
    head_addr: str  # where workers connect (MASTER_ADDR)
    addresses: tuple[str, ...]  # per rank, to name missing nodes; () when unknown
    job: str  # keeps a stray node of another job on the same port out

    def describe(self, ranks: Iterable[int]) -> str:
        def one(rank: int) -> str:
            where = self.addresses[rank] if rank < len(self.addresses) else "address unknown: set IPADDRS"
            return f"node {rank} ({where})"

        return ", ".join(one(rank) for rank in ranks)

    def hello(self) -> bytes:
        return f"{PROTOCOL} job={self.job} rank={self.rank} nnodes={self.nnodes}\n".encode()


def wait_at_barrier(spec: BarrierSpec, *, stopped: Callable[[], bool] = lambda: False) -> bool:
    """Return True once every node arrived, False if `stopped()` (the head's shutdown sentinel)
    turned true first; raise LauncherError on a timeout or a refusal."""
    if spec.nnodes == 1:
        return True
    started = time.monotonic()
    if spec.rank == 0:
        _run_head(spec)
        proceed = True
    else:
        proceed = _run_worker(spec, stopped)
    if proceed:
        say(f"container barrier: all {spec.nnodes} nodes arrived after {time.monotonic() - started:.1f} s")
    return proceed


# --- head ------------------------------------------------------------------------------------------


def _listen(port: int) -> socket.socket:
    try:
        try:
            return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise
            return socket.create_server(("", port))  # no IPv6 in this container
    except OSError as error:
        msg = (f"container barrier: cannot listen on CONTAINER_BARRIER_PORT {port} ({error.strerror}): "
               "another job, or a second node with rank 0, holds it; free the port or set "
               "CONTAINER_BARRIER_PORT to a free one")  # fmt: skip
        raise LauncherError(msg, exit_code=EXIT_FAILED) from error


def _identify(line: str, spec: BarrierSpec, arrived: dict[int, socket.socket]) -> int | str:
    """The worker rank a hello line announces, or why it is refused."""
    words = line.split()
    fields = dict(word.split("=", 1) for word in words[1:] if "=" in word)
    if not words or words[0] != PROTOCOL:
        return f"not a {PROTOCOL} hello: a launcher of another version, or not a launcher at all"
    if fields.get("job") != spec.job:
        return f"this node is in job {fields.get('job')!r}, the head in job {spec.job!r}: check SLURM_JOB_ID"
    try:
        rank, nnodes = int(fields.get("rank", "")), int(fields.get("nnodes", ""))
    except ValueError:
        return f"malformed hello {line!r}"
    if nnodes != spec.nnodes:
        return (
            f"this node has NNODES={nnodes}, the head NNODES={spec.nnodes}: give every node the same NNODES"
        )
    if not 0 < rank < spec.nnodes:
        return f"rank {rank} is not a worker rank of a {spec.nnodes}-node job: check NODE_RANK"
    if rank in arrived:
        return f"node {rank} already arrived: give every node its own NODE_RANK"
    return rank


def _tell(conn: socket.socket, message: str) -> None:
    with contextlib.suppress(OSError):
        conn.setblocking(True)
        conn.settimeout(CONNECT_TIMEOUT_S)
        conn.sendall(f"{message}\n".encode())


def _run_head(spec: BarrierSpec) -> None:
    listener = _listen(spec.port)
    say(f"container barrier: node 0 listening on port {spec.port}; waiting up to {spec.timeout_s:g} s "
        f"for {spec.nnodes - 1} more node(s)")  # fmt: skip
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    arrived: dict[int, socket.socket] = {}
    pending: dict[socket.socket, bytes] = {}
    deadline = time.monotonic() + spec.timeout_s
    try:
        while len(arrived) < spec.nnodes - 1:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                missing = [rank for rank in range(1, spec.nnodes) if rank not in arrived]
                line = (f"container barrier: {spec.describe(missing)} never arrived within "
                        f"{spec.timeout_s:g} s: read that node's container log, or raise BARRIER_TIMEOUT_S")  # fmt: skip
                for conn in arrived.values():
                    _tell(conn, f"abort {line}")
                raise LauncherError(line, exit_code=EXIT_FAILED)
            for key, _ in selector.select(min(remaining, POLL_S)):
                if key.fileobj is listener:
                    with contextlib.suppress(OSError):
                        conn, _peer = listener.accept()
                        conn.setblocking(False)
                        selector.register(conn, selectors.EVENT_READ)
                        pending[conn] = b""
                    continue
                _receive(cast(socket.socket, key.fileobj), spec, selector, arrived, pending)
        for conn in arrived.values():
            _tell(conn, "go")
    finally:
        for conn in [*arrived.values(), *pending]:
            conn.close()
        selector.close()
        listener.close()


def _receive(
    conn: socket.socket,
    spec: BarrierSpec,
    selector: selectors.BaseSelector,
    arrived: dict[int, socket.socket],
    pending: dict[socket.socket, bytes],
) -> None:
    try:
        data = conn.recv(MAX_LINE)
    except OSError:
        data = b""
    if not data:  # closed: a worker that arrived and left no longer counts
        for rank, known in list(arrived.items()):
            if known is conn:
                del arrived[rank]
                say(f"container barrier: {spec.describe([rank])} left before every node arrived")
        selector.unregister(conn)
        pending.pop(conn, None)
        conn.close()
        return
    if conn not in pending:
        return  # an arrived worker has nothing more to say
    pending[conn] += data
    if b"\n" not in pending[conn] and len(pending[conn]) < MAX_LINE:
        return
    line = pending.pop(conn).split(b"\n", 1)[0].decode(errors="replace")
    verdict = _identify(line, spec, arrived)
    if isinstance(verdict, str):
        say(f"container barrier: refused a node: {verdict}")
        _tell(conn, f"refused {verdict}")
        selector.unregister(conn)
        conn.close()
        return
    arrived[verdict] = conn
    say(f"container barrier: {spec.describe([verdict])} arrived ({len(arrived) + 1} of {spec.nnodes})")


# --- worker ----------------------------------------------------------------------------------------


def _run_worker(spec: BarrierSpec, stopped: Callable[[], bool]) -> bool:
    say(f"container barrier: node {spec.rank} waiting up to {spec.timeout_s:g} s for node 0 at "
        f"{spec.head_addr}:{spec.port}")  # fmt: skip
    deadline = time.monotonic() + spec.timeout_s
    while not stopped():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            msg = (f"container barrier: {spec.describe([0])} never arrived within {spec.timeout_s:g} s "
                   f"(nothing answered on {spec.head_addr}:{spec.port}): read the head's container log, "
                   "or raise BARRIER_TIMEOUT_S")  # fmt: skip
            raise LauncherError(msg, exit_code=EXIT_FAILED)
        try:
            conn = socket.create_connection(
                (spec.head_addr, spec.port), timeout=min(CONNECT_TIMEOUT_S, remaining)
            )
        except OSError:
            time.sleep(min(RETRY_S, remaining))
            continue
        with conn:
            verdict = _await_verdict(conn, spec, stopped)
        if verdict is not None:
            return verdict
    return False


def _await_verdict(conn: socket.socket, spec: BarrierSpec, stopped: Callable[[], bool]) -> bool | None:
    """True on `go`, False if stopped, None if the head hung up without a verdict (try again)."""
    try:
        conn.sendall(spec.hello())
    except OSError:
        return None
    conn.settimeout(POLL_S)
    cap = time.monotonic() + spec.timeout_s + VERDICT_GRACE_S
    received = b""
    while b"\n" not in received:
        if stopped():
            return False
        if time.monotonic() > cap:
            msg = f"container barrier: node 0 at {spec.head_addr}:{spec.port} gave no verdict: read its container log"
            raise LauncherError(msg, exit_code=EXIT_FAILED)
        try:
            data = conn.recv(MAX_LINE)
        except TimeoutError:
            continue
        except OSError:
            return None
        if not data or len(received) > MAX_LINE:
            return None
        received += data
    kind, _, text = received.split(b"\n", 1)[0].decode(errors="replace").partition(" ")
    if kind == "go":
        return True
    if kind == "abort":
        raise LauncherError(text, exit_code=EXIT_FAILED)
    if kind == "refused":
        msg = f"container barrier: the head refused this node: {text}"
        raise LauncherError(msg, exit_code=EXIT_BAD_INPUT)
    return None
