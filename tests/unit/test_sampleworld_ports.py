"""A state dir's servers follow the port base: an `up` with other ports never takes another world's
server for its own (the case behind a wrong-key base pushed over another checkout's world)."""

from __future__ import annotations

import socket
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from sampleworld import proc, services, world
from sampleworld.layout import PORTS, StateDir


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listener(state: StateDir, port: int) -> services.Service:
    """A server that only listens, recorded under the state dir like the world's own."""
    code = (
        "import socket, time; s = socket.socket(); "
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        f"s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(120)"
    )
    return services.Service(
        name="listener",
        port=port,
        argv=(sys.executable, "-c", code, "--root", str(state.root)),
        marker=f"--root {state.root}",
    )


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    state = StateDir(tmp_path / "state")
    state.create()
    return state


def test_a_new_port_base_stops_the_servers_of_the_old_one(
    state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = _listener(state, _free_port())
    monkeypatch.setattr(world, "_services", lambda _state: [old])
    world._follow_port_base(state)  # first `up`: records the ports, stops nothing
    assert services.ensure_running(state, old)
    pid = services.running_pid(state, old)
    assert pid is not None
    try:
        world._follow_port_base(state)  # the same ports: ours keeps running
        assert services.running_pid(state, old) == pid

        monkeypatch.setattr(world, "PORTS", replace(PORTS, registry=PORTS.registry + 1))
        world._follow_port_base(state)
        assert services.running_pid(state, old) is None
        assert not proc.pid_alive(pid)
    finally:
        if proc.pid_alive(pid):
            proc.stop_pid(pid)


def test_another_worlds_server_on_the_new_ports_is_named_not_taken(
    state: StateDir, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    other_state = StateDir(tmp_path / "other")
    other_state.create()
    port = _free_port()
    theirs = _listener(other_state, port)
    assert services.ensure_running(other_state, theirs)
    try:
        ours = _listener(state, _free_port())
        monkeypatch.setattr(world, "_services", lambda _state: [ours])
        world._follow_port_base(state)
        assert services.ensure_running(state, ours)
        # The same state dir asked for with another port base, whose port the other world holds.
        monkeypatch.setattr(world, "PORTS", replace(PORTS, registry=PORTS.registry + 1))
        world._follow_port_base(state)
        moved = replace(ours, port=port)
        with pytest.raises(world.SampleWorldError, match="taken by a process this world did not start"):
            services.ensure_running(state, moved)
    finally:
        services.stop(other_state, theirs)
        services.stop(state, ours)


def test_a_port_a_client_connection_holds_is_waited_for_then_taken(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "state")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        client = socket.create_connection(server.getsockname())  # its local port: one of the ephemeral range
        accepted, _ = server.accept()
        held = int(client.getsockname()[1])
        service = _listener(state, held)
        assert not services.port_bindable(held)
        with pytest.raises(world.SampleWorldError, match="held by a socket of this host"):
            services.wait_until_bindable(service, timeout=0.6)

        def end_the_connection() -> None:  # as a server ends it: the server's side waits out TIME_WAIT
            accepted.close()
            client.close()

        threading.Timer(0.5, end_the_connection).start()
        services.wait_until_bindable(service, timeout=30)
        assert services.port_bindable(held)
