"""The engine is found as the docker CLI finds it: DOCKER_HOST, else DOCKER_CONTEXT, else the config's
current context, else the default socket; both imagebuild and the shipped importer.

The context files are the docker CLI's own format, as Docker CLI 28.2.2 wrote them for
`docker context create rootless --description "Rootless mode" --docker host=unix:///run/user/1000/docker.sock`
(and with `ca=,cert=,key=` or `skip-tls-verify=true`); tests/integration/test_docker_context.py has the
real CLI write them and checks both against its engine.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.engine.docker import DockerEngine
from imagebuild.engine.http_api import HttpEngine
from imagebuild.errors import ConfigError, EngineError
from imagebuild.importer.docker_context import DEFAULT_HOST, ContextError, engine_endpoint
from imagebuild.importer.failures import BadInput
from imagebuild.importer.socket_engine import SocketEngine
from tests.unit.engine_support import EngineHandler, serving


def add_context(config: Path, name: str, host: str, *, skip_verify: bool = False, tls: tuple[str, ...] = ()) -> Path:
    """A context as `docker context create` stores it: meta.json, and the TLS files it was given."""
    context_id = hashlib.sha256(name.encode()).hexdigest()
    meta = config / "contexts" / "meta" / context_id
    meta.mkdir(parents=True)
    endpoint = {"Host": host, "SkipTLSVerify": skip_verify}
    (meta / "meta.json").write_text(json.dumps({"Name": name, "Metadata": {}, "Endpoints": {"docker": endpoint}}, separators=(",", ":")))
    tls_dir = config / "contexts" / "tls" / context_id / "docker"
    for file in tls:
        tls_dir.mkdir(parents=True, exist_ok=True)
        (tls_dir / file).write_text("-----BEGIN CERTIFICATE-----\n")
    return tls_dir


def use_context(config: Path, name: str) -> None:
    """`docker context use NAME`: the config's currentContext."""
    (config / "config.json").write_text(json.dumps({"auths": {}, "currentContext": name}, indent="\t"))


def test_docker_host_wins_then_docker_context_then_the_current_context(docker_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    add_context(docker_config, "rootless", "unix:///run/user/1000/docker.sock")
    add_context(docker_config, "node", "unix:///run/node.sock")
    assert engine_endpoint() == engine_endpoint({"DOCKER_CONFIG": str(docker_config)})
    assert (engine_endpoint().host, engine_endpoint().source) == (DEFAULT_HOST, "the default socket")
    use_context(docker_config, "rootless")
    endpoint = engine_endpoint()
    assert (endpoint.host, endpoint.context) == ("unix:///run/user/1000/docker.sock", "rootless")
    assert endpoint.source == f'docker context "rootless", the current one in {docker_config / "config.json"}'
    monkeypatch.setenv("DOCKER_CONTEXT", "node")
    assert (engine_endpoint().host, engine_endpoint().source) == ("unix:///run/node.sock", 'docker context "node", from DOCKER_CONTEXT')
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/mine.sock")  # as the CLI: DOCKER_HOST over any context
    assert (engine_endpoint().host, engine_endpoint().context, engine_endpoint().source) == ("unix:///run/mine.sock", "", "DOCKER_HOST")


def test_the_default_context_is_the_default_socket(docker_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_context(docker_config, "default")
    assert engine_endpoint().host == DEFAULT_HOST
    monkeypatch.setenv("DOCKER_CONTEXT", "default")
    assert (engine_endpoint().host, engine_endpoint().context) == (DEFAULT_HOST, "")


def test_a_config_the_cli_cannot_parse_leaves_the_default_socket_and_says_so(docker_config: Path) -> None:
    (docker_config / "config.json").write_text("{not json")
    endpoint = engine_endpoint()
    assert endpoint.host == DEFAULT_HOST
    assert endpoint.source.startswith(f"the default socket, {docker_config / 'config.json'} not read: ")
    assert endpoint.chosen == f" ({endpoint.source})"  # what an unreachable engine's message adds


@pytest.mark.parametrize("named_by", ["DOCKER_CONTEXT", "config"])
def test_a_context_that_does_not_exist_is_named_with_its_file(docker_config: Path, monkeypatch: pytest.MonkeyPatch, named_by: str) -> None:
    if named_by == "DOCKER_CONTEXT":
        monkeypatch.setenv("DOCKER_CONTEXT", "gone")
    else:
        use_context(docker_config, "gone")
    with pytest.raises(ContextError) as error:
        engine_endpoint()
    meta = docker_config / "contexts" / "meta" / hashlib.sha256(b"gone").hexdigest() / "meta.json"
    by = "from DOCKER_CONTEXT" if named_by == "DOCKER_CONTEXT" else f"the current one in {docker_config / 'config.json'}"
    assert str(error.value) == (
        f'docker context "gone", {by}, does not exist (no {meta}); `docker context ls` lists the contexts, or set DOCKER_HOST'
    )


def test_a_context_without_a_docker_endpoint_is_refused(docker_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    meta = docker_config / "contexts" / "meta" / hashlib.sha256(b"k8s").hexdigest()
    meta.mkdir(parents=True)
    (meta / "meta.json").write_text('{"Name":"k8s","Metadata":{},"Endpoints":{"kubernetes":{}}}')
    monkeypatch.setenv("DOCKER_CONTEXT", "k8s")
    with pytest.raises(ContextError, match=r'docker context "k8s", from DOCKER_CONTEXT: .*meta.json names no docker endpoint host'):
        engine_endpoint()


def test_a_tls_context_gives_its_files_and_skip_verify(docker_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tls_dir = add_context(docker_config, "remote", "tcp://10.0.0.5:2376", tls=("ca.pem", "cert.pem", "key.pem"))
    add_context(docker_config, "insecure", "tcp://10.0.0.6:2376", skip_verify=True)
    add_context(docker_config, "plain", "tcp://10.0.0.7:2375")
    monkeypatch.setenv("DOCKER_CONTEXT", "remote")
    tls = engine_endpoint().tls
    assert tls is not None
    assert (tls.ca, tls.cert, tls.key, tls.verify) == (tls_dir / "ca.pem", tls_dir / "cert.pem", tls_dir / "key.pem", True)
    monkeypatch.setenv("DOCKER_CONTEXT", "insecure")
    tls = engine_endpoint().tls
    assert tls is not None
    assert (tls.ca, tls.cert, tls.verify) == (None, None, False)
    monkeypatch.setenv("DOCKER_CONTEXT", "plain")
    assert engine_endpoint().tls is None


def test_docker_tls_verify_applies_to_docker_host_only(docker_config: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.5:2376")
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(tmp_path))
    tls = engine_endpoint().tls
    assert tls is not None
    assert (tls.ca, tls.cert, tls.key, tls.verify) == (tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem", True)


class _Engine(EngineHandler):
    """What creating a client asks: the version, and /info for the store."""

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rsplit("/", 1)[-1]
        body = {"version": {"Version": "20.10.24", "ApiVersion": "1.41", "MinAPIVersion": "1.12"},
                "info": {"Driver": "overlay2", "DriverStatus": []}, "_ping": "OK"}.get(path)  # fmt: skip
        if isinstance(body, str):
            self.answer(200, raw=body.encode())
        else:
            self.answer(200 if body is not None else 404, body)


@pytest.fixture
def context_engine(docker_config: Path, tmp_path: Path) -> Iterator[str]:
    """An engine on a socket only the current context names; the default socket is not it."""
    socket_path = tmp_path / "rootless.sock"
    add_context(docker_config, "rootless", f"unix://{socket_path}")
    use_context(docker_config, "rootless")
    with serving(socket_path, _Engine):
        yield f"unix://{socket_path}"


def test_the_shipped_importer_and_imagebuild_reach_the_context_s_engine(context_engine: str) -> None:
    assert SocketEngine.from_env().address == context_engine
    engine = HttpEngine.from_env()  # the plain-socket fast path does not take the default socket
    try:
        assert engine.address == context_engine
        assert isinstance(engine, DockerEngine)
    finally:
        engine.close()


def test_a_missing_context_is_bad_input_in_imagebuild_and_in_the_importer(
    docker_config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCKER_CONTEXT", "gone")
    with pytest.raises(BadInput, match='docker context "gone", from DOCKER_CONTEXT, does not exist'):
        SocketEngine.from_env()
    with pytest.raises(ConfigError, match='docker context "gone", from DOCKER_CONTEXT, does not exist'):
        HttpEngine.from_env()
    assert main(["diff", "sha256:" + "1" * 64, "sha256:" + "2" * 64]) == 2
    err = capsys.readouterr().err
    assert err.startswith('imagebuild: error: docker context "gone", from DOCKER_CONTEXT, does not exist')
    assert "Traceback" not in err
    assert err.count("\n") == 1


def test_unusable_tls_files_are_one_line_in_the_importer(docker_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    add_context(docker_config, "remote", "tcp://127.0.0.1:9", tls=("ca.pem",))  # not a certificate
    monkeypatch.setenv("DOCKER_CONTEXT", "remote")
    with pytest.raises(BadInput, match=r'docker context "remote", from DOCKER_CONTEXT: cannot use its TLS files \(.*ca.pem\)'):
        SocketEngine.from_env()


def test_an_unreachable_context_engine_is_said_with_the_context_that_named_it(docker_config: Path, tmp_path: Path) -> None:
    add_context(docker_config, "rootless", f"unix://{tmp_path}/gone.sock")
    use_context(docker_config, "rootless")
    with pytest.raises(EngineError) as error:
        HttpEngine.from_env()
    assert str(error.value).startswith(f"no Docker socket at {tmp_path}/gone.sock: start the engine")
    assert str(error.value).endswith(f' (docker context "rootless", the current one in {docker_config / "config.json"})')
