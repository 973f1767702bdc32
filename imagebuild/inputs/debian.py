"""Debian's grammars, as kinds of value: package names, versions, suites, snapshot IDs.

Every OS package that reaches step 4's RUN line (``apt-get install name=version``), every
value of an ``apt`` pin and every entry of apt.lock.toml is checked against these, so a
value that is not what Debian's policy allows is refused where it is read, never quoted
into a shell line and hoped for the best. The rules are Debian Policy 5.6.1 (``Package``:
lowercase letters, digits, ``+ - .``, at least two characters, starting alphanumeric) and
5.6.12 (``Version``: ``[epoch:]upstream[-revision]``), and the snapshot services' dated IDs
(``YYYYMMDDTHHMMSSZ``, UTC), the same for snapshot.debian.org and snapshot.ubuntu.com.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from imagebuild.inputs.values import Kind, pattern_kind

DEB_PACKAGE_RE = re.compile(r"[a-z0-9][a-z0-9+.-]+")
# epoch: digits and ':'; upstream starts with a digit; the revision is after the last '-', never empty.
# (Policy allows ':' in the upstream part after an epoch; no archive package uses it, so it is refused.)
DEB_VERSION_RE = re.compile(r"(?:[0-9]+:)?[0-9][A-Za-z0-9.+~]*(?:-[A-Za-z0-9.+~-]*[A-Za-z0-9.+~])?")
SNAPSHOT_ID_RE = re.compile(r"[0-9]{8}T[0-9]{6}Z")
SNAPSHOT_FORMAT = "%Y%m%dT%H%M%SZ"

DEB_PACKAGE = pattern_kind(
    "a Debian package name", DEB_PACKAGE_RE.pattern, "lowercase letters, digits and '+-.', two or more"
)
DEB_ARCH = pattern_kind("a Debian architecture", r"[a-z0-9][a-z0-9-]*", "e.g. 'amd64'")
APT_SUITE = pattern_kind("an apt suite", r"[a-z0-9][a-z0-9.+-]*", "e.g. 'bookworm' or 'noble-updates'")
APT_COMPONENT = pattern_kind("an apt component", r"[a-z0-9][a-z0-9.+/-]*", "e.g. 'main'")


DEB_VERSION = pattern_kind(
    "a Debian version", DEB_VERSION_RE.pattern, "[epoch:]upstream[-revision], upstream starting with a digit"
)


def snapshot_time(snapshot: str) -> datetime:
    """A snapshot ID as a UTC time (the ID must already be of SNAPSHOT_ID's form)."""
    return datetime.strptime(snapshot, SNAPSHOT_FORMAT).replace(tzinfo=UTC)


def snapshot_id(moment: datetime) -> str:
    """The snapshot ID naming ``moment`` (UTC)."""
    return moment.astimezone(UTC).strftime(SNAPSHOT_FORMAT)


def _snapshot(value: str) -> str | None:
    if not SNAPSHOT_ID_RE.fullmatch(value):
        return "is not a snapshot ID (YYYYMMDDTHHMMSSZ, UTC, e.g. '20261201T000000Z')"
    try:
        snapshot_time(value)
    except ValueError:
        return "is not a real date and time (YYYYMMDDTHHMMSSZ, UTC)"
    return None


SNAPSHOT_ID = Kind("a snapshot ID", _snapshot)

# Where the apt step (render) and lock's resolver put the snapshot as apt's one source.
SNAPSHOT_LIST = "/etc/apt/sources.list.d/imagebuild-snapshot.list"
# apt-get -s: "Inst NAME [OLD] (NEW ARCHIVE [ARCH])" -> NAME=NEW
INST_TO_REQUIREMENT = r"s/^Inst \([^ ]*\) \(\[[^]]*\] \)\{0,1\}(\([^ ]*\) .*/\1=\3/p"
