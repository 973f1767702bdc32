"""An apt pin's newest snapshot, as its snapshot service answers for the current time.

Both services serve ``ARCHIVE/ID/dists/SUITE/InRelease`` for a dated ID, and differ in what an ID
that is not one of theirs gives:

* snapshot.debian.org (and the sample world's stand-in) keeps discrete imports and redirects
  an ID to the import at or before it: asked for *now*, the redirect names the newest snapshot;
* snapshot.ubuntu.com serves any time after 2023-03-01 as the archive was then, without a
  redirect: asked for *now*, the answer is the current state under the current time's ID.

So the newest snapshot is the ID in the final URL of ``ARCHIVE/<now>/dists/SUITE/InRelease``.
For a service of the second kind that ID changes every second although the archive does not: a
recorded snapshot whose InRelease is byte-identical to the current one is still the newest, and
lock keeps it (``--outdated`` says "current"). Every hop obeys the one plain-http rule (http.py).
"""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlsplit

import requests

from imagebuild.inputs.debian import SNAPSHOT_ID_RE, snapshot_id
from imagebuild.lock.http import Http
from imagebuild.lock.repository import Resolved
from imagebuild.lock.source_errors import FetchError
from imagebuild.pins import AptPin

MAX_RELEASE_BYTES = 16 << 20  # an InRelease is a few hundred KiB; anything far larger is not one


def in_release_url(pin: AptPin, snapshot: str) -> str:
    return f"{pin.snapshot_url(snapshot)}dists/{pin.suite}/InRelease"


def newest_snapshot(pin: AptPin, http: Http, *, now: datetime | None = None) -> Resolved:
    """The snapshot a lock of ``pin`` records now (see the module's docstring), as a source answer."""
    asked = snapshot_id(now or datetime.now(UTC))
    url = in_release_url(pin, asked)
    final, body = http.request(url, _final_url_and_body)
    newest = snapshot_in(pin, final, url)
    if pin.snapshot and pin.snapshot != newest:
        recorded = http.request(in_release_url(pin, pin.snapshot), _final_url_and_body, accept=(200, 404))[1]
        if recorded == body:  # the same archive state under a later name: nothing newer
            return Resolved(
                fields={"snapshot": pin.snapshot}, detail=f"{pin.snapshot} is still the newest state"
            )
    detail = f"asked for {asked}, served {newest}" if newest != asked else f"served as asked ({asked})"
    return Resolved(fields={"snapshot": newest}, detail=detail)


def snapshot_in(pin: AptPin, final: str, asked: str) -> str:
    """The snapshot ID of a URL under the pin's archive (the service redirected there, or served it)."""
    archive = urlsplit(pin.source_url)
    served = urlsplit(final)
    rest = served.path.removeprefix(archive.path) if served.netloc == archive.netloc else None
    segment = rest.split("/")[0] if rest is not None else ""
    if not SNAPSHOT_ID_RE.fullmatch(segment):
        raise FetchError(
            asked,
            f"the service answered from {final}, which names no snapshot of {pin.source_url}",
            "Check `archive` in pins.toml: it must be the snapshot service's archive root, without the ID",
        )
    return segment


def _final_url_and_body(resp: requests.Response) -> tuple[str, bytes]:
    if resp.status_code == 404:
        return resp.url, b""
    body = resp.raw.read(MAX_RELEASE_BYTES + 1, decode_content=True)
    if len(body) > MAX_RELEASE_BYTES:
        raise FetchError(
            resp.url, f"the InRelease is over {MAX_RELEASE_BYTES >> 20} MiB", "This is no apt archive"
        )
    return resp.url, body
