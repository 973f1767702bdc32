"""Why the Docker engine could not be reached, in the words of the person who has to fix it.

docker-py wraps the operating system's error in requests' and urllib3's
(``Error while fetching server API version: ('Connection aborted.',
FileNotFoundError(2, 'No such file or directory'))``). The cause is dug out of
that chain here and said plainly: no socket, nothing listening, permission
denied, connection refused, no answer, a name that does not resolve, TLS.
Nothing here imports docker-py; ``engine.docker`` passes its exceptions in.
"""

from __future__ import annotations

import socket
import ssl
from pathlib import Path
from urllib.parse import urlsplit

import imagebuild
from imagebuild.importer.docker_context import DEFAULT_HOST

DEFAULT_SOCKET = DEFAULT_HOST.removeprefix("unix://")
ADDRESS_FORMS = "unix:///PATH/docker.sock, tcp://HOST:PORT or ssh://USER@HOST"


def start_hint() -> str:
    """How to get an engine; the script that installs one exists only in a checkout, so only then is it named."""
    hint = "start the engine (systemctl start docker) or set DOCKER_HOST"
    script = Path(imagebuild.__file__).resolve().parents[1] / "scripts" / "ensure-docker.sh"
    if script.is_file():
        hint += f"; in this checkout: bash {script.relative_to(script.parents[1])}"
    return hint


def probe(address: str, timeout: float) -> None:
    """Connect to the engine once before docker-py does; raise OSError when that fails.

    docker-py buries the cause of a failed connection in its wrappers and leaves the
    failed socket unclosed; this connection is closed whatever happens.
    """
    scheme, _, rest = address.partition("://")
    if scheme in ("unix", "http+unix"):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(timeout)
            sock.connect(rest or DEFAULT_SOCKET)
    elif scheme in ("tcp", "http", "https"):
        where = urlsplit(f"//{rest}")
        if where.hostname and where.port:
            with socket.create_connection((where.hostname, where.port), timeout=timeout):
                pass


def unreachable(address: str, error: BaseException) -> str:
    """One line for an engine at ``address`` that could not be reached because of ``error``."""
    cause = root_cause(error)
    scheme, _, rest = address.partition("://")
    if scheme in ("unix", "http+unix"):
        path = rest or DEFAULT_SOCKET
        if isinstance(cause, FileNotFoundError) or (cause is None and not Path(path).exists()):
            return f"no Docker socket at {path}: {start_hint()}"
        if isinstance(cause, PermissionError):
            return (
                f"permission denied on the Docker socket {path}: run as root, or join the docker group "
                "(usermod -aG docker $USER, then log in again)"
            )
        if isinstance(cause, ConnectionRefusedError):
            return f"nothing answers on the Docker socket {path} (the engine has stopped?): {start_hint()}"
    elif isinstance(cause, ConnectionRefusedError):
        return f"connection refused at {address}: no Docker engine listens there; start it, or point DOCKER_HOST at one"
    elif isinstance(cause, socket.gaierror):
        return f"cannot resolve the host of DOCKER_HOST={address}; check its name"
    if isinstance(cause, ssl.SSLError):
        return f"TLS with the Docker engine at {address} failed ({cause}); check DOCKER_TLS_VERIFY and DOCKER_CERT_PATH"
    return f"cannot reach the Docker engine at {address}: {plain_reason(error)}; {start_hint()}"


def plain_reason(error: BaseException) -> str:
    """What went wrong in a request to the engine: the engine's own message, or the network's cause."""
    explanation = getattr(error, "explanation", None)  # docker-py's APIError: what the engine said
    if explanation:
        return str(explanation).strip().splitlines()[0]
    cause = root_cause(error)
    if isinstance(cause, TimeoutError | socket.timeout) or _named(error, "Timeout"):
        return "no answer in time"
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused"
    if isinstance(cause, ConnectionResetError | BrokenPipeError) or _named(error, "RemoteDisconnected"):
        return "the engine closed the connection"
    if isinstance(cause, FileNotFoundError):
        return "the engine's socket is gone"
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror
    text = str(cause or error).strip() or type(error).__name__
    return text.splitlines()[0]


def root_cause(error: BaseException) -> OSError | None:
    """The operating system's error under requests' and urllib3's wrappers, if there is one."""
    seen: set[int] = set()
    queue: list[BaseException] = [error]
    while queue:
        current = queue.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and _is_leaf(current):
            return current
        nested = [current.__cause__, current.__context__, getattr(current, "reason", None), *current.args]
        queue += [e for e in nested if isinstance(e, BaseException)]
    return None


def _is_leaf(error: OSError) -> bool:
    """requests' and urllib3's errors are OSErrors too, but carry no errno: the cause is further down."""
    return error.errno is not None or isinstance(error, socket.timeout | ssl.SSLError | TimeoutError)


def _named(error: BaseException, word: str) -> bool:
    """A wrapper type that says what happened (urllib3's ReadTimeoutError, http.client's RemoteDisconnected)."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and len(chain) < 10:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return any(word in type(e).__name__ for e in chain)
