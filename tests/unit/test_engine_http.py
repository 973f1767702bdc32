"""HttpEngine: the calls a cached build makes, over http.client, as docker-py makes them.

Against a stand-in engine on a unix socket that answers like Docker 20.10 and records each request:
the versioned paths and query docker-py sends, a build stream split anywhere, a missing image, an
engine that refuses, one that is too old or absent (the same words as DockerEngine), and when
docker-py is used instead (a docker config that changes the request, a tcp or ssh engine, a context).
"""

from __future__ import annotations

import http.server
import json
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagebuild.engine.docker import DockerEngine
from imagebuild.engine.http_api import HttpEngine, json_messages, plain_socket
from imagebuild.engine.interface import BuildRequest
from imagebuild.errors import EngineError, UnknownImageError
from tests.unit.engine_support import serving

Seen = list[tuple[str, str, dict[str, list[str]], bytes]]  # (method, path, query, body) per request
IMAGE = "sha256:" + "ab" * 32
BUILD_STREAM: list[dict[str, Any]] = [
    {"stream": "Step 1/2 : FROM base\n"},
    {"stream": " ---> Using cache\n"},
    {"stream": "caf\u00e9 \u2713\n"},
    {"aux": {"ID": IMAGE}},
    {"stream": "Successfully built abababababab\n"},
]


class _Engine(http.server.BaseHTTPRequestHandler):
    """Docker 20.10's answers to the requests of a cached build; every request kept in ``seen``."""

    api_version = "1.41"
    seen: list[tuple[str, str, dict[str, list[str]], bytes]]

    def _answer(self, status: int, body: bytes, chunks: list[bytes] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if chunks is None:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def _record(self) -> tuple[str, dict[str, list[str]]]:
        url = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        self.seen.append((self.command, url.path, urllib.parse.parse_qs(url.query), self.rfile.read(length)))
        return url.path, urllib.parse.parse_qs(url.query)

    def do_GET(self) -> None:
        path, _ = self._record()
        if path == "/version":
            version = {"Version": "20.10.24", "ApiVersion": self.api_version, "MinAPIVersion": "1.12"}
            self._answer(200, json.dumps(version).encode())
        elif path == "/v1.41/info":
            self._answer(200, json.dumps({"Driver": "overlay2", "ServerVersion": "20.10.24"}).encode())
        elif path == f"/v1.41/images/{IMAGE}/json":
            inspected = {"Id": IMAGE, "RepoTags": ["x:1"], "Config": {"Env": ["A=1"], "Labels": {"l": "v"}}}
            self._answer(
                200, json.dumps(inspected | {"RootFS": {"Layers": ["sha256:" + "01" * 32]}}).encode()
            )
        elif path == f"/v1.41/images/{IMAGE}/history":
            self._answer(200, json.dumps([{"CreatedBy": "RUN b"}, {"CreatedBy": "RUN a"}]).encode())
        else:
            self._answer(404, b'{"message":"No such image: missing:1"}')

    def do_POST(self) -> None:
        path, query = self._record()
        if path == "/v1.41/build":
            if query.get("networkmode") == ["refuse"]:
                self._answer(400, b'{"message":"network mode refuse is not supported"}')
                return
            stream = b"".join(json.dumps(m).encode() + b"\r\n" for m in BUILD_STREAM)
            # cut everywhere: inside a JSON object, inside a multi-byte character
            self._answer(200, b"", [stream[i : i + 7] for i in range(0, len(stream), 7)])
        elif path.endswith("/tag") and query.get("repo") == ["refused"]:
            self._answer(500, b'{"message":"tag refused by policy"}')
        else:
            self._answer(201, b"")

    def log_message(self, *args: object) -> None:
        pass


def _serve(
    socket_path: Path, handler: type[_Engine]
) -> Iterator[list[tuple[str, str, dict[str, list[str]], bytes]]]:
    seen: list[tuple[str, str, dict[str, list[str]], bytes]] = []
    handler.seen = seen
    with serving(socket_path, handler):
        yield seen


@pytest.fixture
def seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_config: Path
) -> Iterator[list[tuple[str, str, dict[str, list[str]], bytes]]]:
    socket_path = tmp_path / "engine.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{socket_path}")
    yield from _serve(socket_path, _Engine)


def test_a_cached_build_sends_docker_pys_requests_and_reads_the_stream_however_it_is_cut(seen: Seen) -> None:
    engine = HttpEngine.from_env()
    assert isinstance(engine, HttpEngine)
    request = BuildRequest(
        context=b"tar bytes", build_args={"A": "1"}, network_mode="host", cache_from=("repo:tag-cache",)
    )
    events = list(engine.build(request))
    assert [e.text for e in events if e.text] == [m["stream"] for m in BUILD_STREAM if "stream" in m]
    assert [e.image_id for e in events if e.image_id] == [IMAGE]
    method, path, query, body = seen[-1]
    assert (method, path, body) == ("POST", "/v1.41/build", b"tar bytes")
    # docker-py's query for the same request (DockerEngine.build_chunks): booleans as requests words them
    assert query == {
        "q": ["False"],
        "nocache": ["False"],
        "rm": ["True"],
        "forcerm": ["True"],
        "pull": ["False"],
        "buildargs": ['{"A": "1"}'],
        "networkmode": ["host"],
        "cachefrom": ['["repo:tag-cache"]'],
    }
    engine.tag(IMAGE, "registry:5000/repo:tag")
    assert seen[-1][1:3] == (
        f"/v1.41/images/{IMAGE}/tag",
        {"tag": ["tag"], "repo": ["registry:5000/repo"], "force": ["False"]},
    )
    engine.tag(IMAGE, "registry:5000/repo")
    assert seen[-1][2]["tag"] == ["latest"]
    assert engine.store().describe() == "Docker 20.10.24, the graph-driver store (overlay2)"
    assert engine.version() == "20.10.24"


def test_inspect_and_has_image(seen: Seen) -> None:
    engine = HttpEngine.from_env()
    info = engine.inspect_image(IMAGE)
    assert (info.id, info.tags, info.env, info.labels) == (IMAGE, ("x:1",), {"A": "1"}, {"l": "v"})
    assert info.history == ("RUN b", "RUN a")
    assert info.layers == ("sha256:" + "01" * 32,)
    assert info.identity == IMAGE
    assert engine.has_image(IMAGE)
    assert not engine.has_image("sha256:" + "cd" * 32)
    with pytest.raises(UnknownImageError, match=r"^no image 'missing:1' in the Docker engine at unix://"):
        engine.inspect_image("missing:1")


def test_refusals_are_one_line_naming_what_was_asked(seen: Seen) -> None:
    engine = HttpEngine.from_env()
    with pytest.raises(EngineError, match=r"failed the build request: network mode refuse is not supported$"):
        list(engine.build(BuildRequest(context=b"", network_mode="refuse")))
    with pytest.raises(EngineError, match=rf"^could not tag {IMAGE} as refused:1: tag refused by policy$"):
        engine.tag(IMAGE, "refused:1")


class _OldEngine(_Engine):
    api_version = "1.39"


def test_an_engine_too_old_is_refused_as_docker_engine_refuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_config: Path
) -> None:
    socket_path = tmp_path / "old.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{socket_path}")
    for _ in _serve(socket_path, _OldEngine):
        with pytest.raises(EngineError, match=r"serves Docker API 1\.39; imagebuild needs 1\.41"):
            HttpEngine.from_env()


def test_no_engine_is_said_in_docker_engines_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_config: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")
    messages = []
    for kind in (HttpEngine, DockerEngine):
        with pytest.raises(EngineError) as error:
            kind.from_env()
        messages.append(str(error.value))
    assert messages[0] == messages[1]
    assert messages[0].startswith(f"no Docker socket at {tmp_path}/absent.sock")


@pytest.mark.parametrize(
    ("host", "config", "expected"),
    [
        ("unix:///run/x.sock", {}, "/run/x.sock"),
        ("", {}, "/var/run/docker.sock"),
        ("", {"currentContext": "default"}, "/var/run/docker.sock"),
        (
            "unix:///run/x.sock",
            {"currentContext": "remote"},
            "/run/x.sock",
        ),  # DOCKER_HOST wins, as in docker-py
        ("", {"currentContext": "remote"}, None),
        ("tcp://127.0.0.1:2375", {}, None),
        ("ssh://user@host", {}, None),
        ("unix://relative.sock", {}, None),
        ("unix:///run/x.sock?x=1", {}, None),
        ("unix:///run/x.sock", {"auths": {"registry:5000": {"auth": "dTpw"}}}, None),
        ("unix:///run/x.sock", {"credsStore": "pass"}, None),
        ("unix:///run/x.sock", {"credHelpers": {"registry:5000": "pass"}}, None),
        ("unix:///run/x.sock", {"proxies": {"default": {"httpProxy": "http://proxy:3128"}}}, None),
        ("unix:///run/x.sock", {"auths": {}}, "/run/x.sock"),
    ],
)
def test_docker_py_is_used_wherever_it_would_send_another_request(
    host: str,
    config: dict[str, object],
    expected: str | None,
    monkeypatch: pytest.MonkeyPatch,
    docker_config: Path,
) -> None:
    if host:
        monkeypatch.setenv("DOCKER_HOST", host)
    else:
        monkeypatch.delenv("DOCKER_HOST", raising=False)
    (docker_config / "config.json").write_text(json.dumps(config))
    assert plain_socket() == expected


def test_the_config_docker_py_reads_is_the_one_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_config: Path
) -> None:
    """DOCKER_CONFIG without a config.json: docker-py falls back to ~/.docker, then ~/.dockercfg."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/x.sock")
    (tmp_path / ".docker").mkdir()
    (tmp_path / ".docker" / "config.json").write_text('{"credsStore": "pass"}')
    assert plain_socket() is None
    (tmp_path / ".docker" / "config.json").unlink()
    (tmp_path / ".dockercfg").write_text("{}")
    assert plain_socket() is None
    (tmp_path / ".dockercfg").unlink()
    assert plain_socket() == "/run/x.sock"


def test_an_unreadable_docker_config_is_left_to_docker_py(
    monkeypatch: pytest.MonkeyPatch, docker_config: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/x.sock")
    (docker_config / "config.json").write_text("{not json")
    assert plain_socket() is None


def test_a_stream_that_ends_inside_a_message_is_an_engine_error() -> None:
    assert list(json_messages([b'{"a": 1}{"b"', b": 2}\r\n"])) == [{"a": 1}, {"b": 2}]
    with pytest.raises(EngineError, match="ended inside a message"):
        list(json_messages([b'{"a": 1}{"b": ']))
