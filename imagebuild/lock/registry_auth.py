"""Challenge-driven registry authentication, sending credentials only where docker would.

The credentials themselves come from the docker config through docker-py
(:func:`imagebuild.engine.credentials.registry_credentials`: ``auths``,
``credsStore``, ``credHelpers``), looked up by the registry's host as docker
does. They are then used as docker uses them, with one line drawn tighter:

* A ``Basic`` challenge gets them on the registry's own URL. Docker speaks
  plain HTTP only to insecure registries, loopback ones by default; so do we.
* A ``Bearer`` challenge names a token realm, often on another host (Docker
  Hub's registry-1.docker.io sends clients to auth.docker.io). The
  credentials go there as Basic auth (or, for an identity token, as an
  OAuth2 refresh token, ``grant_type=refresh_token``) only over HTTPS or to a
  loopback address. Docker would also send them to a plain-HTTP realm on any
  host the registry names; the lock asks no such realm at all, not even for an
  anonymous token (lock/http.py's one rule for every hop).
* The bearer token goes back only to the registry; requests drops the
  Authorization header on a redirect to another host (blob downloads).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.structures import CaseInsensitiveDict

from imagebuild.lock.http import FetchError, Http, plain_http_problem

Headers = CaseInsensitiveDict[str]
Credentials = tuple[str, str]
# docker's convention (credential helpers, docker-py): this user name means
# the secret is an identity token, to be traded for an access token by OAuth2.
IDENTITY_TOKEN_USER = "<token>"
OAUTH_CLIENT_ID = "imagebuild"
_CHALLENGE_PARAM_RE = re.compile(r'(\w+)="([^"]*)"')


def may_send_credentials(url: str) -> bool:
    """Whether credentials may travel to ``url``: over HTTPS, or plain HTTP to a loopback address.

    The same rule as for every request of the lock (http.plain_http_problem).
    """
    return plain_http_problem(url) is None


def _challenge(resp: requests.Response) -> tuple[str, dict[str, str]]:
    header = resp.headers.get("WWW-Authenticate", "")
    scheme, _, rest = header.partition(" ")
    return scheme.lower(), dict(_CHALLENGE_PARAM_RE.findall(rest))


class RegistrySession:
    """Authenticated requests to one repository of one registry: token fetched once, reused."""

    def __init__(
        self, http: Http, *, registry: str, repository: str, creds: Credentials | None, actions: str = "pull"
    ) -> None:
        self.http = http
        self.actions = actions  # the scope asked for when a challenge names none: pull, or pull,push
        self.registry = registry
        self.repository = repository
        self.creds = creds
        self.auth_header: dict[str, str] = {}
        self.basic: Credentials | None = None

    def get(self, url: str, headers: Mapping[str, str]) -> tuple[bytes, Headers]:
        _, body, answered = self.send("GET", url, headers)
        return body, answered

    def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        *,
        body: bytes | None = None,
        accept: Collection[int] = (200,),
    ) -> tuple[int, bytes, Headers]:
        """(status, body, headers) of one request, authenticated on the registry's challenge.

        ``body`` is sent as it is (publish's attestation pushes, in a session made with
        ``actions="pull,push"``, whose bearer token is asked for both at once).
        """

        def consume(resp: requests.Response) -> tuple[int, bytes, Headers]:
            return resp.status_code, resp.content, resp.headers

        def first(resp: requests.Response) -> tuple[int, bytes, Any]:
            if resp.status_code == 401:
                return 401, b"", _challenge(resp)
            return resp.status_code, resp.content, resp.headers

        status, answer, extra = self.http.request(
            url, first, method=method, headers={**headers, **self.auth_header}, auth=self.basic,
            data=body, accept=(*accept, 401),
        )  # fmt: skip
        if status != 401:
            return status, answer, extra
        scheme, params = extra
        self._authenticate(url, scheme, params)
        return self.http.request(
            url, consume, method=method, headers={**headers, **self.auth_header}, auth=self.basic,
            data=body, accept=accept,
        )  # fmt: skip

    def _login_hint(self) -> str:
        return (
            f"Check the credentials for {self.registry} in the docker config (docker login {self.registry})"
        )

    def _authenticate(self, url: str, scheme: str, params: dict[str, str]) -> None:
        if self.auth_header or self.basic:
            raise FetchError(
                url, "HTTP 401 Unauthorized (credentials refused)", self._login_hint(), status=401
            )
        if scheme == "basic":
            if self.creds is None or self.creds[0] == IDENTITY_TOKEN_USER:
                raise FetchError(
                    url,
                    "HTTP 401 Unauthorized (the registry wants a login)",
                    f"Run `docker login {self.registry}` (or set DOCKER_CONFIG)",
                    status=401,
                )
            if not may_send_credentials(url):
                raise FetchError(
                    url,
                    "the registry asks for a password over plain HTTP; refusing to send it",
                    "Credentials go only over HTTPS or to a loopback address: use the registry's https URL",
                    status=401,
                )
            self.basic = self.creds
            return
        if scheme != "bearer" or "realm" not in params:
            raise FetchError(
                url,
                f"HTTP 401 with an unsupported challenge '{scheme}'",
                "Check the registry URL",
                status=401,
            )
        realm = params["realm"]
        parts = urlsplit(realm)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise FetchError(
                url, f"the registry's token realm {realm!r} is not an http(s) URL", "Check the registry"
            )
        # A push session asks for pull and push at once: one token serves its HEADs, GETs and PUTs.
        wanted = f"repository:{self.repository}:{self.actions}"
        scope = wanted if self.actions != "pull" else params.get("scope") or wanted
        token = self._fetch_token(realm, params.get("service", ""), scope)
        self.auth_header = {"Authorization": f"Bearer {token}"}

    def _fetch_token(self, realm: str, service: str, scope: str) -> str:
        creds = self.creds
        # Http refuses a plain-HTTP realm elsewhere before anything is sent: the credentials stay here.
        query = {"service": service, "scope": scope}
        token_url = requests.Request("GET", realm, params=query).prepare().url or realm

        def consume(resp: requests.Response) -> str:
            try:
                data = resp.json()
            except ValueError as e:
                raise FetchError(
                    token_url, "the token endpoint sent invalid JSON", "Check the registry"
                ) from e
            token = data.get("token") or data.get("access_token") if isinstance(data, dict) else None
            if not isinstance(token, str) or not token:
                raise FetchError(token_url, "the token endpoint sent no token", "Check the registry")
            return token

        try:
            if creds is not None and creds[0] == IDENTITY_TOKEN_USER:
                form = {
                    "grant_type": "refresh_token",
                    "refresh_token": creds[1],
                    "service": service,
                    "scope": scope,
                    "client_id": OAUTH_CLIENT_ID,
                }
                return self.http.request(realm, consume, method="POST", data=form)
            return self.http.request(token_url, consume, auth=creds)
        except FetchError as e:
            if e.status not in (401, 403):
                raise
            who = "the credentials" if creds else "anonymous access"
            raise FetchError(
                token_url,
                f"{e.cause}: the token endpoint refused {who}",
                f"{self._login_hint()}, and that the repository '{self.repository}' exists",
                status=e.status,
            ) from e
