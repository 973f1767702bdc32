"""The one HTTP helper of ``imagebuild lock``.

Every request of the lock (registries, package indexes, file downloads) goes
through :class:`Http`: one ``requests.Session`` per worker thread (sessions
are not documented as thread-safe), a connect/read timeout on every call
(``--timeout``, never past the overall ``--deadline``), retries with backoff
through :func:`imagebuild.util.retry.retry_call` on transient failures
(connection reset, 5xx, 429, a body cut short), honouring Retry-After up to
a cap, and a :class:`FetchError` (source_errors.py) that names the URL, the
cause (DNS, TLS, 404, 401/403, timeout, ...) and what to check next.

A timeout is not retried: a server that accepted the connection and sent
nothing for ``--timeout`` seconds fails the lock after that long, not after
three times that long.

No request and no redirect hop goes over plain HTTP to a host that is not a
loopback address (:func:`plain_http_problem`, the one rule): pins.toml may name
``http://`` only for the sample world's loopback stand-ins, and an index page, a
registry's token realm or a redirect must not lead anywhere else in the clear.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import urljoin, urlsplit

import requests
from requests.auth import AuthBase

from imagebuild.inputs.references import is_loopback
from imagebuild.lock.source_errors import FetchError
from imagebuild.util.retry import (
    NO_DEADLINE,
    Cancelled,
    Deadline,
    RetryHook,
    RetryPolicy,
    Transient,
    parse_retry_after,
    retry_call,
)

T = TypeVar("T")

CHUNK_SIZE = 1 << 20
USER_AGENT = "imagebuild-lock (+requests)"
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
RETRY_AFTER_CAP = 60.0  # the longest Retry-After the lock waits out
DEADLINE_HINT = "Raise --deadline if the sources are just slow, or check the network"
PLAIN_HTTP_HINT = (
    "Only https is trusted off this machine (plain http only to a loopback address): "
    "ask the source for its https URL"
)


def plain_http_problem(url: str) -> str | None:
    """Why ``url`` may not be fetched: plain HTTP to a host that is not a loopback address; else None."""
    parts = urlsplit(url)
    if parts.scheme == "https" or (parts.scheme == "http" and is_loopback(parts.netloc.rpartition("@")[2])):
        return None
    if parts.scheme == "http":
        return f"plain http to {parts.hostname}, which is not a loopback address"
    return f"{parts.scheme or 'no'} scheme, not https"


def refuse_plain_http(url: str, target: str | None = None, *, redirected: bool = False) -> None:
    """FetchError naming ``url`` when ``target`` (``url`` itself by default) breaks plain_http_problem's rule."""
    target = target or url
    problem = plain_http_problem(target)
    if problem is not None:
        cause = f"redirected to {target}: {problem}" if redirected else f"refused {problem}"
        raise FetchError(url, cause, PLAIN_HTTP_HINT)


@dataclass(frozen=True, kw_only=True)
class TlsFiles:
    """Where a server's certificates differ from the system's: a CA file, a client certificate and key."""

    ca: Path | None = None  # None: the system's CA store (or REQUESTS_CA_BUNDLE)
    client: tuple[Path, Path] | None = None


class Http:
    """Timeouts, retries and error translation for every HTTP call of the lock."""

    def __init__(
        self,
        *,
        timeout: float,
        attempts: int = 3,
        backoff: float = 0.25,
        deadline: Deadline = NO_DEADLINE,
        cancel: threading.Event | None = None,
        on_retry: RetryHook | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        self.timeout = timeout
        self.policy = RetryPolicy(attempts=max(1, attempts), backoff=backoff, max_wait=RETRY_AFTER_CAP)
        self.deadline = deadline
        self.cancel = cancel or threading.Event()
        self.on_retry = on_retry
        self.tls = tls or TlsFiles()
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self) -> Http:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every session; a worker still running (after Ctrl-C) gets Cancelled, not a new one."""
        with self._lock:
            self._closed = True
            for session in self._sessions:
                session.close()
            self._sessions.clear()

    def check_cancelled(self) -> None:
        if self.cancel.is_set():
            raise Cancelled

    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            with self._lock:
                if self._closed:
                    raise Cancelled
                session = requests.Session()
                session.headers["User-Agent"] = USER_AGENT
                if self.tls.ca is not None:
                    session.verify = str(self.tls.ca)
                if self.tls.client is not None:
                    session.cert = (str(self.tls.client[0]), str(self.tls.client[1]))
                self._sessions.append(session)
            self._local.session = session
        return session

    def request(
        self,
        url: str,
        consume: Callable[[requests.Response], T],
        *,
        method: str = "GET",
        headers: Mapping[str, str] | None = None,
        auth: AuthBase | tuple[str, str] | None = None,
        data: Mapping[str, str] | bytes | None = None,
        accept: Collection[int] = (200,),
    ) -> T:
        """Send a request and hand the streamed response to ``consume``.

        ``consume`` runs inside the retry loop, so a body cut short is
        retried from the start like any other transient failure. Statuses
        outside ``accept`` raise FetchError. ``data`` is a form, or a body's bytes
        (publish's pushes of attestation blobs and manifests).
        """

        refuse_plain_http(url)

        def every_hop(resp: requests.Response, *args: object, **kwargs: object) -> None:
            if resp.is_redirect:
                target = urljoin(resp.url, resp.headers["Location"])
                if plain_http_problem(target) is not None:
                    resp.close()  # requests never gets to release this connection
                    refuse_plain_http(url, target, redirected=True)

        def once(attempt: int) -> T:
            self.check_cancelled()
            timeout = min(self.timeout, self.deadline.remaining())
            if timeout <= 0:
                raise FetchError(url, "the overall deadline passed before the request", DEADLINE_HINT)
            try:
                with self._session().request(
                    method,
                    url,
                    headers=dict(headers or {}),
                    auth=auth,
                    data=data,
                    stream=True,
                    timeout=(timeout, timeout),
                    hooks={"response": every_hop},  # before requests follows a redirect
                ) as resp:
                    if resp.status_code not in accept:
                        raise status_error(url, resp, attempts=attempt)
                    return consume(resp)
            except requests.RequestException as e:
                cause, hint, transient = describe_exception(e, timeout, url)
                if timeout < self.timeout and self.deadline.passed:
                    cause, hint, transient = "stopped at the overall deadline", DEADLINE_HINT, False
                tries = f" (after {attempt} attempts)" if attempt > 1 else ""
                raise FetchError(url, cause + tries, hint, transient=transient) from e

        return retry_call(
            once,
            classify=_transient,
            policy=self.policy,
            deadline=self.deadline,
            cancel=self.cancel,
            on_retry=self.on_retry,
        )


def _transient(e: Exception) -> Transient | None:
    if isinstance(e, FetchError) and e.transient:
        return Transient(after=e.retry_after)
    return None


def status_error(url: str, resp: requests.Response, *, attempts: int = 1) -> FetchError:
    status = resp.status_code
    text = f"HTTP {status} {resp.reason or ''}".strip()
    retry_after = parse_retry_after(resp.headers.get("Retry-After"))
    if status == 401:
        hint = "Authentication required: check the credentials (docker login / ~/.docker/config.json)"
    elif status == 403:
        hint = "Access denied: check that the credentials may read this resource"
    elif status == 404:
        hint = "Not found: check the name, tag, version or URL in pins.toml"
    elif status == 429:
        hint = "Rate limited: wait and retry, or authenticate for a higher limit"
    elif status >= 500:
        hint = "The server failed: retry later or check the service's status"
    else:
        hint = "Unexpected answer: check the URL in pins.toml"
    if retry_after is not None and retry_after > RETRY_AFTER_CAP:
        text += (
            f"; it asks to retry after {retry_after:.0f}s, longer than the {RETRY_AFTER_CAP:.0f}s lock waits"
        )
    tries = f" (after {attempts} attempts)" if attempts > 1 else ""
    return FetchError(
        url,
        text + tries,
        hint,
        status=status,
        transient=status in RETRY_STATUSES,
        retry_after=retry_after,
    )


def _chain(e: BaseException) -> str:
    """The exception and its causes as one lowercase string, for classification."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = e
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(f"{type(current).__name__}: {current}")
        for arg in current.args:
            if isinstance(arg, BaseException):
                parts.append(f"{type(arg).__name__}: {arg}")
        current = current.__cause__ or current.__context__
    return " | ".join(parts).lower()


def describe_exception(e: requests.RequestException, timeout: float, url: str) -> tuple[str, str, bool]:
    """(cause, what to check, transient?) for a requests exception."""
    chain = _chain(e)
    host = urlsplit(url).hostname or url
    if isinstance(e, requests.exceptions.SSLError):
        return (
            f"TLS error ({e})",
            "Check the server certificate, the system CA store or REQUESTS_CA_BUNDLE",
            False,
        )
    if "nameresolution" in chain or "name or service not known" in chain or "getaddrinfo" in chain:
        return (
            f"DNS lookup failed for {host}",
            "Check the host name in pins.toml and the network/DNS configuration",
            False,
        )
    if isinstance(e, requests.Timeout) or "timed out" in chain or "timeout" in chain:
        # Not retried: a server silent for the whole timeout rarely answers the next try.
        return (
            f"timed out after {timeout:g}s",
            "The server is slow or unreachable: retry, or raise --timeout",
            False,
        )
    if isinstance(e, requests.exceptions.ChunkedEncodingError) or "incompleteread" in chain:
        return (
            "connection dropped before the whole body arrived",
            "Retry; if it persists the server or a proxy is cutting downloads",
            True,
        )
    if "connection refused" in chain:
        return (
            f"connection refused by {urlsplit(url).netloc}",
            "Check that the server is up and the host/port in pins.toml are right",
            False,
        )
    if isinstance(e, requests.ConnectionError):
        return ("connection failed or reset", "Check the network, proxy settings and the server", True)
    return (f"request failed ({type(e).__name__}: {e})", "Check the URL in pins.toml", False)


__all__ = ["CHUNK_SIZE", "Cancelled", "FetchError", "Http", "plain_http_problem", "refuse_plain_http", "status_error"]
