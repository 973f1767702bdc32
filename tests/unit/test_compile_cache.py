"""--compile-cache: what it accepts, what it says (never a credential), and the cache it serves to ccache.

ccache's HTTP storage protocol is spoken here as ccache 4.7 speaks it (GET, HEAD, PUT below the URL's
path, 404 a miss); tests/integration/test_compile_cache.py runs the real ccache in a real build.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagebuild.build import compile_cache, compile_cache_server
from imagebuild.build.compile_cache import (
    CacheCounts,
    CompileCache,
    cache_steps_run,
    compile_cache_problem,
    serving,
)
from imagebuild.build.compile_cache_server import HOLDER_PATH, Holder, holder_at
from imagebuild.build.stream import StepTiming
from imagebuild.cli import main
from imagebuild.errors import ExitCode, ImageBuildError
from imagebuild.inputs.layout import COMPILE_CACHE_PORT, COMPILE_CACHE_URL
from imagebuild.log import setup_logging
from imagebuild.project import find_project
from imagebuild.render import RenderOptions, render_inputs
from imagebuild.testing import free_port
from tests import REPO

SOMETHING_LISTENS = compile_cache.something_listens  # before tests/unit/conftest.py stubs it

KEY = "0a/78log9s30lut86hlqgonbhrvc8o30p2"  # a key path as ccache 4.7 asks for it (its "subdirs" layout)


@pytest.fixture
def port() -> int:
    """Where the tests serve: not the fixed address, which a docker test's build may hold meanwhile."""
    return free_port()


def ask(port: int, method: str, key: str, body: bytes | None = None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, f"/ccache/{key}", body=body)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_a_directory_cache_misses_stores_and_hits(tmp_path: Path, port: int) -> None:
    cache = CompileCache(directory=tmp_path / "objects")
    with serving(cache, network="host", port=port) as counts:
        assert counts is not None
        assert ask(port, "GET", KEY)[0] == 404
        assert ask(port, "HEAD", KEY)[0] == 404
        assert ask(port, "PUT", KEY, b"object bytes")[0] == 201
        assert ask(port, "HEAD", KEY)[0] == 200
        assert ask(port, "GET", KEY) == (200, b"object bytes")
        assert ask(port, "GET", "../../etc/passwd")[0] in (400, 404)
    assert (tmp_path / "objects" / KEY).read_bytes() == b"object bytes"
    assert counts.to_json() == {
        "cache": str(tmp_path / "objects"),
        "hits": 1,
        "misses": 1,
        "stored": 1,
        "failed": 0,
    }
    assert counts.summary().endswith("1 of 2 lookups hit (50%), 1 entries stored")
    with pytest.raises(ConnectionRefusedError):  # nothing listens once the build is over
        ask(port, "GET", KEY)


class _Remote(http.server.BaseHTTPRequestHandler):
    """A user's ccache HTTP storage that wants basic auth."""

    objects: dict[str, bytes]
    auth: list[str]

    def do_GET(self) -> None:
        self.auth.append(self.headers.get("Authorization", ""))
        data = self.objects.get(self.path)
        self.send_response(200 if data is not None else 404)
        self.send_header("Content-Length", str(len(data or b"")))
        self.end_headers()
        self.wfile.write(data or b"")

    def do_PUT(self) -> None:
        self.auth.append(self.headers.get("Authorization", ""))
        self.objects[self.path] = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def remote() -> Iterator[tuple[str, type[_Remote]]]:
    handler = type("Remote", (_Remote,), {"objects": {}, "auth": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://bob:hunter2@127.0.0.1:{server.server_port}/team/ccache", handler
    finally:
        server.shutdown()
        server.server_close()


def test_a_remote_cache_is_forwarded_with_its_credentials_and_named_without_them(
    remote: tuple[str, type[_Remote]], port: int
) -> None:
    url, handler = remote
    cache = CompileCache(url=url)
    assert "hunter2" not in cache.described
    assert "bob" not in cache.described
    with serving(cache, network="host", port=port) as counts:
        assert ask(port, "PUT", KEY, b"object")[0] == 201
        assert ask(port, "GET", KEY) == (200, b"object")
    assert handler.objects == {f"/team/ccache/{KEY}": b"object"}
    assert set(handler.auth) == {"Basic Ym9iOmh1bnRlcjI="}  # bob:hunter2
    assert counts is not None
    assert "hunter2" not in counts.summary()
    assert "hunter2" not in str(counts.to_json())


def test_a_dead_remote_costs_one_failure_then_every_lookup_misses_at_once(port: int) -> None:
    with serving(
        CompileCache(url=f"http://127.0.0.1:{free_port()}/ccache"), network="host", port=port
    ) as counts:
        assert ask(port, "GET", KEY)[0] == 404
        assert ask(port, "GET", KEY)[0] == 404
    assert counts is not None
    assert (counts.misses, counts.failed) == (2, 1)


def test_the_address_taken_by_another_program_is_one_line_naming_the_option(tmp_path: Path, port: int) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", port))
        other.listen()
        with (
            pytest.raises(ImageBuildError, match=rf"^--compile-cache: cannot serve the cache at 127\.0\.0\.1:{port}: another program"),
            serving(CompileCache(directory=tmp_path), network="host", port=port),
        ):
            pass


def test_a_build_with_another_cache_than_the_one_served_stops_before_the_engine(tmp_path: Path, port: int) -> None:
    with (
        serving(CompileCache(directory=tmp_path / "a"), network="host", port=port),
        pytest.raises(ImageBuildError, match=rf"serves another compile cache \({tmp_path / 'a'}\) at 127\.0\.0\.1:{port}"),
        serving(CompileCache(directory=tmp_path / "b"), network="host", port=port),
    ):
        pass


def wait_for_server(port: int, seconds: float = 5.0) -> None:
    """Until something accepts at ``port`` (the takeover polls every 0.2 s)."""
    deadline = time.monotonic() + seconds
    while not SOMETHING_LISTENS(port):
        assert time.monotonic() < deadline, f"nothing took over 127.0.0.1:{port}"
        time.sleep(0.05)


def test_builds_at_once_with_one_cache_share_its_server_and_the_later_takes_over(tmp_path: Path, port: int) -> None:
    with contextlib.ExitStack() as first:
        first_counts = first.enter_context(serving(CompileCache(directory=tmp_path / "objects"), network="host", port=port))
        # The same directory named another way: the same cache.
        with serving(CompileCache(directory=tmp_path / "." / "objects"), network="host", port=port) as second_counts:
            assert second_counts is not None
            assert second_counts.shared_with == os.getpid()
            assert ask(port, "PUT", KEY, b"from the second build")[0] == 201  # answered by the first's server
            assert ask(port, "GET", KEY) == (200, b"from the second build")
            first.close()  # the first build ends
            wait_for_server(port)
            assert ask(port, "GET", KEY) == (200, b"from the second build")  # now the second's own server
            assert ask(port, "GET", "0b/" + KEY[3:])[0] == 404
    assert first_counts is not None
    assert (first_counts.hits, first_counts.stored, first_counts.shared_with) == (1, 1, None)
    assert "shared_seconds" not in first_counts.to_json()
    assert (second_counts.hits, second_counts.misses, second_counts.stored) == (1, 1, 0)
    assert 0 < second_counts.shared_seconds < 5
    assert second_counts.to_json()["shared_seconds"] == round(second_counts.shared_seconds, 1)
    assert f"the server of the build of pid {os.getpid()} answered (and counted) this build's lookups" in second_counts.summary()
    assert second_counts.unasked((4,)) == ""  # it asked, of the other server
    with pytest.raises(ConnectionRefusedError):
        ask(port, "GET", KEY)


def test_a_build_sharing_to_its_end_stops_its_takeover(tmp_path: Path, port: int) -> None:
    with serving(CompileCache(directory=tmp_path), network="host", port=port) as first:
        with serving(CompileCache(directory=tmp_path), network="host", port=port) as second:
            assert second is not None
        assert second.shared_seconds > 0
        assert ask(port, "GET", KEY)[0] == 404  # the first still serves
    assert first is not None
    assert first.misses == 1


def test_a_holder_that_ends_while_it_is_asked_leaves_the_address_to_this_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, port: int
) -> None:
    with contextlib.ExitStack() as first:
        first.enter_context(serving(CompileCache(directory=tmp_path), network="host", port=port))

        def ended_meanwhile(asked: int) -> None:  # the first build ends between the bind and the question
            first.close()

        monkeypatch.setattr(compile_cache_server, "holder_at", ended_meanwhile)
        with serving(CompileCache(directory=tmp_path / "another"), network="host", port=port) as counts:
            assert ask(port, "GET", KEY)[0] == 404
    assert counts is not None
    assert (counts.misses, counts.shared_with) == (1, None)


def test_what_a_server_says_of_itself_names_its_cache_without_credentials(
    remote: tuple[str, type[_Remote]], port: int
) -> None:
    url, _ = remote
    cache = CompileCache(url=url)
    with serving(cache, network="host", port=port):
        holder = holder_at(port)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", HOLDER_PATH)
        said = connection.getresponse().read().decode()
        connection.close()
    assert holder == Holder(cache=cache.described, key=cache.key, pid=os.getpid())
    assert "hunter2" not in said
    assert "bob" not in said
    assert holder_at(port) is None  # nothing answers now
    other = CompileCache(url=url.replace("hunter2", "other"))
    assert other.described == cache.described
    assert other.key != cache.key  # other credentials: not the same cache to share


def test_the_dockerfile_names_the_address_served() -> None:
    assert f"http://127.0.0.1:{COMPILE_CACHE_PORT}/ccache" == COMPILE_CACHE_URL
    for arch in ("gfx942", "gfx950"):
        dockerfile = (REPO / "docker" / arch / "Dockerfile").read_text()
        # Under both of ccache's names: remote (4.7+), secondary (4.4-4.6: Ubuntu 22.04's 4.5.1).
        both = f'CCACHE_REMOTE_STORAGE="{COMPILE_CACHE_URL}" CCACHE_SECONDARY_STORAGE="{COMPILE_CACHE_URL}"'
        assert dockerfile.count(f'{both} CCACHE_REMOTE_ONLY="true"') == 2


def _timings(cached: set[int]) -> list[StepTiming]:
    return [StepTiming(number=n, title=f"step {n}", seconds=1.0, cached=n in cached) for n in range(1, 19)]


def test_steps_4_and_7_compile_through_the_cache_and_count_only_when_they_ran() -> None:
    dockerfile = render_inputs(find_project(REPO).load("gfx942"), RenderOptions(allow_unpinned=True))
    assert cache_steps_run(dockerfile, _timings(cached=set())) == (4, 7)
    assert cache_steps_run(dockerfile, _timings(cached={4})) == (7,)
    assert cache_steps_run(dockerfile, _timings(cached=set(range(1, 19)))) == ()


def test_a_cache_no_compile_asked_is_warned_about_only_when_its_steps_ran() -> None:
    """A ccache before 4.4 knows no remote storage: its compiles never reach the cache, silently."""
    unasked = CacheCounts(cache="/cache")
    assert unasked.unasked(()) == ""  # steps 4 and 7 came from the layer cache: nothing to ask
    warning = unasked.unasked((4, 7))
    assert "compile cache /cache: steps 4, 7 ran and no compile asked the cache" in warning
    assert "older than 4.4" in warning
    assert "compile cache /cache: step 7 ran and no compile asked" in unasked.unasked((7,))
    assert CacheCounts(cache="/cache", misses=2, stored=2).unasked((4, 7)) == ""
    assert CacheCounts(cache="/cache", failed=1).unasked((7,)) == ""  # asked, and the remote failed


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("redis://u:sekret@cache:6379", "redis:// storage is not supported"),
        ("https://bob:sekret@:443/x", "names no host"),
        ("https://bob:sekret@cache:port/x", "port is not a number"),
        ("https://cache/x?token=sekret", "a query or fragment is not forwarded"),
    ],
)
def test_a_bad_url_is_refused_without_its_credential(
    value: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert problem in (compile_cache_problem(value) or "")
    assert (
        main(["-C", str(REPO), "build", "--network", "host", "--compile-cache", value]) == ExitCode.BAD_INPUT
    )
    err = capsys.readouterr().err
    assert "argument --compile-cache" in err
    assert problem in err
    assert "sekret" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_file_is_no_cache_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    assert "not a directory" in (compile_cache_problem(str(tmp_path / "file")) or "")
    assert compile_cache_problem(str(tmp_path / "new" / "dir")) is None


def test_the_cache_needs_the_hosts_network_before_the_engine_is_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["-C", str(REPO), "build", "--compile-cache", str(tmp_path)])
    assert code == ExitCode.BAD_INPUT
    assert "--compile-cache needs --network host" in capsys.readouterr().err



@pytest.mark.parametrize(
    ("network", "listening", "warned"), [("host", True, True), ("host", False, False), (None, True, False)]
)
def test_a_build_without_a_cache_warns_when_something_answers_at_its_ccaches_address(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], port: int, *, network: str | None, listening: bool, warned: bool
) -> None:
    monkeypatch.setattr(compile_cache, "something_listens", SOMETHING_LISTENS)
    setup_logging(0)
    with socket.socket() as server:
        if listening:
            server.bind(("127.0.0.1", port))
            server.listen()
        with serving(None, network=network, port=port) as counts:
            assert counts is None
    assert (f"something answers at 127.0.0.1:{port}" in capsys.readouterr().err) is warned
