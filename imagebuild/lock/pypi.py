"""Pick the wheel of a PyPI release the image will install, and its sha256.

The index is read through the simple API: PEP 691 JSON when the index serves
it, PEP 503 HTML otherwise. The target is the base image's python (from the
``base`` pin) on manylinux 2_17..2_40 for the arch profile's machine; of the
release's wheels, the one whose best tag comes first in packaging's priority
order wins, as pip would choose. A release without a matching wheel is an
error listing what exists (sdists are never chosen: the image build must not
compile a pinned dependency behind our back). A yanked file (PEP 592) is
still chosen when nothing else fits, as pip installs an exactly pinned yanked
release, but it is marked so the report can say so. A page that breaks the
simple API's schema is the index's fault and is reported as such.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urldefrag, urljoin

import requests
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from imagebuild.lock.http import FetchError, Http
from imagebuild.pins.base import simple_project_url

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
ACCEPT = f"{JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
MANYLINUX_MINORS = range(40, 16, -1)  # manylinux_2_40 .. manylinux_2_17, newest first as pip orders
_SHA256_RE = re.compile(r"^[0-9a-fA-F]{64}$")
BROKEN_INDEX_HINT = "The index is at fault: report it to its maintainers, or point `index` at another one"


@dataclass(frozen=True, kw_only=True)
class DistFile:
    filename: str
    url: str
    sha256: str | None  # None when the index does not publish one
    yanked: str | None = None  # the reason ("" when none is given); None: not yanked


@dataclass(frozen=True, kw_only=True)
class WheelChoice:
    file: DistFile
    tag: Tag
    candidates: tuple[str, ...]  # every file of the release, for messages


class NoMatchingWheel(Exception):
    pass


def project_url(index: str, project: str) -> str:
    return simple_project_url(index, project)


def target_platforms(machine: str) -> list[str]:
    platforms: list[str] = []
    for minor in MANYLINUX_MINORS:
        platforms.append(f"manylinux_2_{minor}_{machine}")
        if minor == 17:
            platforms.append(f"manylinux2014_{machine}")  # legacy alias of 2_17
    platforms.append(f"linux_{machine}")
    return platforms


def target_tags(python: str, machine: str) -> list[Tag]:
    """Tags the target interpreter accepts, most specific first."""
    try:
        major, minor = (int(p) for p in python.split(".")[:2])
    except ValueError as e:
        msg = f"python version '{python}' is not MAJOR.MINOR"
        raise ValueError(msg) from e
    version = (major, minor)
    platforms = target_platforms(machine)
    tags = list(cpython_tags(version, platforms=platforms))
    tags += list(compatible_tags(version, interpreter=f"cp{major}{minor}", platforms=platforms))
    return tags


def list_files(http: Http, index: str, project: str) -> list[DistFile]:
    """Every file the index lists for ``project``, via JSON or HTML."""
    url = project_url(index, project)

    def consume(resp: requests.Response) -> list[DistFile]:
        content_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
        base = resp.url or url
        try:
            if content_type == JSON_TYPE:
                return _parse_json(resp.json(), base)
            if content_type in ("text/html", "application/vnd.pypi.simple.v1+html"):
                return _parse_html(resp.text, base)
        except ValueError as e:
            kind = "PEP 691 JSON" if content_type == JSON_TYPE else "PEP 503 HTML"
            raise FetchError(url, f"the index sent an invalid {kind} page ({e})", BROKEN_INDEX_HINT) from e
        raise FetchError(
            url,
            f"the index answered with '{content_type or 'no content type'}', not a simple-API page",
            "Check that `index` in pins.toml is a PEP 503/691 simple index (ends in /simple/)",
        )

    return http.request(url, consume, headers={"Accept": ACCEPT})


def _parse_json(data: Any, base: str) -> list[DistFile]:
    """The files of a PEP 691 page; ValueError naming the first entry that breaks the schema."""
    entries = data.get("files") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        msg = "no 'files' list"
        raise ValueError(msg)
    files: list[DistFile] = []
    for i, f in enumerate(entries):
        where = f"files[{i}]"
        if not isinstance(f, dict):
            msg = f"{where} is not an object"
            raise ValueError(msg)
        filename, link, hashes = f.get("filename"), f.get("url"), f.get("hashes", {})
        if not isinstance(filename, str) or not filename or not isinstance(link, str) or not link:
            msg = f"{where} has no 'filename' or 'url' string"
            raise ValueError(msg)
        where = f"{where} ({filename})"
        if not isinstance(hashes, dict):
            msg = f"{where}: 'hashes' is {_json_type(hashes)}, not an object"
            raise ValueError(msg)
        yanked = f.get("yanked", False)
        if not isinstance(yanked, bool | str):
            msg = f"{where}: 'yanked' is {_json_type(yanked)}, not a boolean or a string"
            raise ValueError(msg)
        files.append(
            DistFile(
                filename=filename,
                url=urljoin(base, link),
                sha256=_sha256(hashes.get("sha256"), where),
                yanked=(yanked if isinstance(yanked, str) else "") if yanked is not False else None,
            )
        )
    return files


def _json_type(value: Any) -> str:
    names = {list: "a list", dict: "an object", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _sha256(value: Any, where: str) -> str | None:
    """The index's sha256 of a file, lowercased; ValueError when it is not one."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not _SHA256_RE.fullmatch(value):
        msg = f"{where}: sha256 {value!r} is not 64 hex digits"
        raise ValueError(msg)
    return value.lower()


@dataclass(frozen=True)
class _Anchor:
    href: str
    text: str
    yanked: str | None  # data-yanked's value; None without the attribute


class _AnchorParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[_Anchor] = []
        self._attrs: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a" and dict(attrs).get("href"):
            self._attrs = dict(attrs)
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._attrs is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._attrs is not None:
            attrs = self._attrs
            yanked = (attrs["data-yanked"] or "") if "data-yanked" in attrs else None
            self.anchors.append(_Anchor(str(attrs["href"]), "".join(self._text).strip(), yanked))
            self._attrs = None


def _parse_html(text: str, base: str) -> list[DistFile]:
    parser = _AnchorParser()
    parser.feed(text)
    files: list[DistFile] = []
    for anchor in parser.anchors:
        link, fragment = urldefrag(urljoin(base, anchor.href))
        algo, _, value = fragment.partition("=")
        filename = anchor.text or link.rsplit("/", 1)[-1]
        sha256 = _sha256(value, f"the link to {filename}") if algo == "sha256" else None
        files.append(DistFile(filename=filename, url=link, sha256=sha256, yanked=anchor.yanked))
    return files


def choose_wheel(files: list[DistFile], project: str, version: str, tags: list[Tag]) -> WheelChoice:
    """The release's wheel whose best tag ranks first in ``tags``; a yanked one only as a last resort.

    pip ranks a yanked file below every other candidate, whatever its tags.
    """
    rank = {tag: i for i, tag in enumerate(tags)}
    want_name, want_version = canonicalize_name(project), Version(version)
    release: list[str] = []
    best: tuple[bool, int, int, DistFile, Tag] | None = None
    for f in files:
        if not f.filename.endswith(".whl"):
            if _sdist_version(f.filename, want_name) == want_version:
                release.append(f.filename)
            continue
        try:
            name, ver, build, file_tags = parse_wheel_filename(f.filename)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        if name != want_name or ver != want_version:
            continue
        release.append(f.filename)
        ranked = [(rank[t], t) for t in file_tags if t in rank]
        if not ranked:
            continue
        position, tag = min(ranked)
        build_number = -build[0] if build else 0
        key = (f.yanked is not None, position, build_number)
        if best is None or key < best[:3]:
            best = (*key, f, tag)
    if best is None:
        msg = (
            f"no wheel of {project}=={version} matches {tags[0]} (or a compatible tag); "
            f"the release has: {', '.join(sorted(release)) or 'no files'}"
        )
        raise NoMatchingWheel(msg)
    return WheelChoice(file=best[3], tag=best[4], candidates=tuple(sorted(release)))


def newest_release(files: list[DistFile], project: str) -> str | None:
    """The newest final (not pre-release, not yanked) version among the project's files, as pip would pick."""
    want_name = canonicalize_name(project)
    versions: set[Version] = set()
    for f in files:
        if f.yanked is not None:
            continue
        version: Version | None
        if f.filename.endswith(".whl"):
            try:
                name, version, _, _ = parse_wheel_filename(f.filename)
            except (InvalidWheelFilename, InvalidVersion):
                continue
            version = version if name == want_name else None
        else:
            version = _sdist_version(f.filename, want_name)
        if version is not None and not version.is_prerelease:
            versions.add(version)
    return str(max(versions)) if versions else None


def _sdist_version(filename: str, want_name: str) -> Version | None:
    for ext in (".tar.gz", ".zip"):
        if filename.endswith(ext):
            stem = filename.removesuffix(ext)
            name, _, ver = stem.rpartition("-")
            if canonicalize_name(name) == want_name:
                try:
                    return Version(ver)
                except InvalidVersion:
                    return None
    return None
