"""Lifecycle of the world's background servers: start once, find again by pid file, stop only our own."""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sampleworld import log, proc
from sampleworld.errors import SampleWorldError
from sampleworld.layout import HOST, StateDir


@dataclass(frozen=True, kw_only=True)
class Service:
    name: str
    port: int | None  # the TCP port of HOST it answers on; None for a daemon with only a unix socket
    argv: tuple[str, ...]
    # A recorded pid counts as ours only while its command line still contains this (pids get reused).
    marker: str
    cwd: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    unix_socket: Path | None = None  # where a port-less daemon (munged) answers

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}" if self.port is not None else str(self.unix_socket)

    def pid_file(self, state: StateDir) -> Path:
        return state.run / f"{self.name}.pid"

    def log_file(self, state: StateDir) -> Path:
        return state.logs / f"{self.name}.log"


def port_open(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def unix_socket_open(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(str(path)) == 0


# How long a port held by a client connection is waited for: an engine keeps an idle connection to
# a registry for about 90 s.
BIND_WAIT_S = 120.0


def port_bindable(port: int, host: str = HOST) -> bool:
    """Whether a server could bind the port now (as the world's servers do, with SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def wait_until_bindable(service: Service, timeout: float) -> None:
    """Wait while a client connection holds the service's port as its local port.

    The world's ports lie in Linux's ephemeral range (32768-60999), so any client socket on this
    host may be given one as its local port while nothing listens there (seen: the registry exited
    at start with "bind: address already in use" while another world's pushes were running).
    Such a socket goes when its connection ends.
    """
    if service.port is None:
        return
    deadline = time.monotonic() + timeout
    while not port_bindable(service.port):
        if time.monotonic() > deadline:
            msg = (
                f"{service.address} for the sample {service.name} is held by a socket of this host "
                f"(not listening: a client connection's local port) after {timeout:.0f}s; "
                f"see `ss -tanp | grep :{service.port}`, or move the world with IMAGEBUILD_SAMPLEWORLD_PORT_BASE"
            )
            raise SampleWorldError(msg)
        time.sleep(0.5)


def answers(service: Service) -> bool:
    if service.port is not None:
        return port_open(service.port)
    return service.unix_socket is not None and unix_socket_open(service.unix_socket)


def running_pid(state: StateDir, service: Service) -> int | None:
    """The pid we recorded for this service, if that process still runs and is still the service."""
    pid_file = service.pid_file(state)
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    if proc.pid_alive(pid) and service.marker in proc.cmdline(pid):
        return pid
    pid_file.unlink(missing_ok=True)
    return None


def ensure_running(state: StateDir, service: Service, *, timeout: float = 30) -> bool:
    """Start the service unless ours already answers; True when this call started it."""
    pid = running_pid(state, service)
    if pid is not None and answers(service):
        return False
    if pid is None and answers(service):
        msg = (
            f"{service.address} for the sample {service.name} is taken by a process this world "
            f"did not start (no live pid in {service.pid_file(state)}); stop it, or run "
            "`python -m sampleworld down` with the state dir that started it"
        )
        raise SampleWorldError(msg)
    if pid is None:
        wait_until_bindable(service, BIND_WAIT_S)
        pid = proc.spawn(service.argv, log_path=service.log_file(state), cwd=service.cwd, env=service.env)
        service.pid_file(state).write_text(f"{pid}\n")
    deadline = time.monotonic() + timeout
    while not answers(service):
        if not proc.pid_alive(pid):
            service.pid_file(state).unlink(missing_ok=True)
            msg = f"the sample {service.name} exited at start; see {service.log_file(state)}"
            raise SampleWorldError(msg)
        if time.monotonic() > deadline:
            msg = (
                f"the sample {service.name} (pid {pid}) does not listen on {service.address} after "
                f"{timeout:.0f}s; see {service.log_file(state)}"
            )
            raise SampleWorldError(msg)
        time.sleep(0.1)
    log.info(f"{service.name}: pid {pid} listening on {service.address}")
    return True


def stop(state: StateDir, service: Service) -> bool:
    """Stop the service if we recorded it; True when something was stopped."""
    pid = running_pid(state, service)
    if pid is None:
        return False
    proc.stop_pid(pid)
    service.pid_file(state).unlink(missing_ok=True)
    log.info(f"{service.name}: stopped pid {pid}")
    return True
