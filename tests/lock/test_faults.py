"""`imagebuild lock` against upstreams that misbehave: every failure is one line,
exit 5 (the source's fault) or 2 (the pins file's), and pins.toml is unchanged."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest

from imagebuild.errors import ConfigError, LockError
from imagebuild.inputs.arch import ArchProfile
from imagebuild.lock import LockResult, lock
from imagebuild.lock.files import hash_url
from imagebuild.lock.git import GitError, GitOptions, GitProcesses, resolve_ref
from imagebuild.lock.http import Http
from imagebuild.lock.pypi import DistFile, choose_wheel, target_tags
from imagebuild.lock.turns import writer_turn
from imagebuild.util.files import write_atomically
from imagebuild.util.retry import Cancelled
from tests.lock.repositories import Registry
from tests.lock.servers import (
    FileServer,
    GitHttpServer,
    SilentServer,
    options,
    processes_mentioning,
    wait_for,
    zip_bytes,
)

WHEEL = zip_bytes(("pkg/__init__.py", b"x = 1\n"))
WHEEL_NAME = "flydsl-0.2.4-cp312-cp312-manylinux_2_27_x86_64.whl"
A, B, C, T = "a" * 40, "b" * 40, "c" * 40, "7" * 40


def wheel_pin(url: str, name: str = "aiter") -> str:
    return f'[{name}]\nkind = "wheel"\nurl = "{url}"\nversion = "1.0"\nsha256 = ""\nsize = 0\n'


def pypi_pin(index: str, version: str = "0.2.4") -> str:
    return (
        f'[flydsl]\nkind = "pypi"\nproject = "flydsl"\nversion = "{version}"\n'
        f'index = "{index}"\nfilename = ""\nsha256 = ""\n'
    )


def base_pin(image: str) -> str:
    return (
        f'[base]\nkind = "image"\nimage = "{image}"\ntag = "ci"\ndigest = ""\nplatform_digest = ""\n'
        'python = "3.12"\nsite_packages = "/usr/lib/python3.12/site-packages"\n'
    )


def git_pin(url: str, tag: str = "v1") -> str:
    return f'[mori]\nkind = "git"\nurl = "{url}"\ntag = "{tag}"\ncommit = ""\n'


def write(tmp_path: Path, *tables: str) -> Path:
    path = tmp_path / "pins.toml"
    path.write_text("# pins\n\n" + "\n".join(tables), encoding="utf-8")
    return path


def fails(path: Path, arch: ArchProfile, pattern: str, **kw: object) -> LockError:
    """Lock ``path`` expecting a one-line LockError matching ``pattern``; the file must not change."""
    before = path.read_bytes()
    with pytest.raises(LockError, match=pattern) as e:
        lock(options(path, arch, **kw))
    assert e.value.exit_code == 5
    assert "\n" not in str(e.value)
    assert path.read_bytes() == before
    return e.value


@pytest.fixture
def base(registry: Registry) -> str:
    registry.push_single("faults/base", "ci")
    return base_pin(f"{registry.host}/faults/base")


def index_page(fs: FileServer, files: list[dict[str, object]]) -> str:
    doc = {"meta": {"api-version": "1.0"}, "name": "flydsl", "files": files}
    fs.add("/simple/flydsl/", json.dumps(doc).encode(), "application/vnd.pypi.simple.v1+json")
    return f"{fs.server.url}/simple/"


# --- timeouts and the deadline --------------------------------------------------------------


def test_a_silent_source_fails_after_one_timeout_not_three(
    silent_server: SilentServer, tmp_path: Path, amd64: ArchProfile
) -> None:
    path = write(tmp_path, wheel_pin(f"{silent_server.url}/a.whl"))
    fails(
        path,
        amd64,
        r"^\[aiter\] http://127\.0\.0\.1:\d+/a\.whl: timed out after 0\.5s\. .*--timeout",
        timeout=0.5,
    )
    assert len(silent_server.connections) == 1  # a timeout is not retried


def test_a_slow_answer_within_the_timeout_is_fine(
    file_server: FileServer, tmp_path: Path, amd64: ArchProfile
) -> None:
    path = write(tmp_path, wheel_pin(file_server.add("/slow.whl", WHEEL)))
    file_server.delay = 0.3
    result = lock(options(path, amd64, timeout=2))
    assert result.change("aiter").status == "filled"
    assert file_server.hits["/slow.whl"] == 1


def test_the_deadline_bounds_the_whole_lock(
    silent_server: SilentServer, tmp_path: Path, amd64: ArchProfile
) -> None:
    path = write(tmp_path, wheel_pin(f"{silent_server.url}/a.whl"))
    started = time.monotonic()
    fails(path, amd64, r"\[aiter\] .*overall deadline.*--deadline", timeout=30, deadline=0.5)
    assert time.monotonic() - started < 30  # the deadline, not the 30 s timeout, ended it


# --- statuses and Retry-After ---------------------------------------------------------------


def fetch(fs: FileServer, path: str) -> tuple[int, list[float]]:
    """Hash ``path``; returns its size and the waits between attempts."""
    waits: list[float] = []
    with Http(timeout=5, backoff=0.01, on_retry=lambda _e, _n, wait: waits.append(wait)) as http:
        return hash_url(http, fs.server.url + path).size, waits


def test_retry_after_seconds_is_honoured(file_server: FileServer) -> None:
    file_server.add("/busy.whl", WHEEL)
    file_server.script["/busy.whl"] = [(429, {"Retry-After": "1"})]
    assert fetch(file_server, "/busy.whl") == (len(WHEEL), [1.0])
    assert file_server.hits["/busy.whl"] == 2


def test_retry_after_date_is_honoured(file_server: FileServer) -> None:
    file_server.add("/down.whl", WHEEL)
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=2), usegmt=True)
    file_server.script["/down.whl"] = [(503, {"Retry-After": soon})]
    size, waits = fetch(file_server, "/down.whl")
    assert size == len(WHEEL)
    assert 0.5 < waits[0] <= 2.0  # the server's date, not the 10 ms backoff


def test_retry_after_beyond_the_cap_fails_at_once(
    file_server: FileServer, tmp_path: Path, amd64: ArchProfile
) -> None:
    path = write(tmp_path, wheel_pin(file_server.add("/later.whl", WHEEL)))
    file_server.script["/later.whl"] = [(429, {"Retry-After": "3600"})] * 3
    fails(path, amd64, r"HTTP 429 .*asks to retry after 3600s, longer than the 60s lock waits")
    assert file_server.hits["/later.whl"] == 1


# --- bodies ---------------------------------------------------------------------------------


def test_a_body_shorter_than_its_content_length_is_an_error(
    file_server: FileServer, tmp_path: Path, amd64: ArchProfile
) -> None:
    path = write(tmp_path, wheel_pin(file_server.add("/cut.whl", WHEEL * 50)))
    file_server.cut.add("/cut.whl")
    fails(path, amd64, r"/cut\.whl: connection dropped before the whole body arrived \(after 3 attempts\)")


@pytest.mark.parametrize(
    ("served", "what"),
    [
        ((b"<!DOCTYPE html><html><body>Sign in</body></html>", "text/html"), "an HTML page"),
        ((b"\n  <html>release notes</html>", "application/octet-stream"), "an HTML page"),
        ((b"\x1f\x8b\x08gzip, not zip", "application/gzip"), "application/gzip content that is not a zip"),
    ],
)
def test_a_wheel_download_must_be_a_zip(
    file_server: FileServer, tmp_path: Path, amd64: ArchProfile, served: tuple[bytes, str], what: str
) -> None:
    url = file_server.add("/aiter.whl", *served)
    path = write(tmp_path, wheel_pin(url))
    fails(path, amd64, rf"^\[aiter\] {url}: the server sent {what}, not a wheel")


# --- package index faults -------------------------------------------------------------------


def test_hashes_as_a_list_is_the_index_fault(
    file_server: FileServer, base: str, tmp_path: Path, amd64: ArchProfile
) -> None:
    index = index_page(file_server, [{"filename": WHEEL_NAME, "url": "/f.whl", "hashes": []}])
    path = write(tmp_path, base, pypi_pin(index))
    error = fails(path, amd64, r"^\[flydsl\] .*/simple/flydsl/: the index sent an invalid PEP 691 JSON page")
    assert f"files[0] ({WHEEL_NAME}): 'hashes' is a list, not an object" in str(error)
    assert "The index is at fault" in str(error)


@pytest.mark.parametrize("flavour", ["json", "html"])
def test_a_bad_hash_is_blamed_on_the_index_not_on_pins_toml(
    file_server: FileServer, base: str, tmp_path: Path, amd64: ArchProfile, flavour: str
) -> None:
    if flavour == "json":
        index = index_page(
            file_server, [{"filename": WHEEL_NAME, "url": "/f.whl", "hashes": {"sha256": "xyz"}}]
        )
    else:
        page = f'<a href="/f.whl#sha256=xyz">{WHEEL_NAME}</a>'
        file_server.add("/simple/flydsl/", page.encode(), "text/html")
        index = f"{file_server.server.url}/simple/"
    path = write(tmp_path, base, pypi_pin(index))
    error = fails(path, amd64, r"^\[flydsl\] .*/simple/flydsl/: the index sent an invalid")
    assert "sha256 'xyz' is not 64 hex digits" in str(error)
    assert "pins.toml" not in str(error).split("; ")[0]  # the cause names the index, not the file


def test_a_version_like_latest_is_bad_input_found_before_any_request(
    file_server: FileServer, tmp_path: Path, amd64: ArchProfile
) -> None:
    index = index_page(file_server, [])
    path = write(tmp_path, base_pin("127.0.0.1:1/never/asked"), pypi_pin(index, version="latest"))
    before = path.read_bytes()
    with pytest.raises(ConfigError, match=r"\[flydsl\]: 'version' = 'latest' is not a release version") as e:
        lock(options(path, amd64))
    assert e.value.exit_code == 2
    assert file_server.hits == {}
    assert path.read_bytes() == before


@pytest.mark.parametrize("flavour", ["json", "html"])
def test_a_yanked_file_is_locked_and_flagged(
    file_server: FileServer, base: str, tmp_path: Path, amd64: ArchProfile, flavour: str
) -> None:
    sha = "ab" * 32
    if flavour == "json":
        entry = {"filename": WHEEL_NAME, "url": "/f.whl", "hashes": {"sha256": sha}, "yanked": "broken ABI"}
        index = index_page(file_server, [entry])
    else:
        page = f'<a href="/f.whl#sha256={sha}" data-yanked="broken ABI">{WHEEL_NAME}</a>'
        file_server.add("/simple/flydsl/", page.encode(), "text/html")
        index = f"{file_server.server.url}/simple/"
    path = write(tmp_path, base, pypi_pin(index))
    result = lock(options(path, amd64))
    change = result.change("flydsl")
    assert (change.status, change.yanked) == ("filled", "broken ABI")
    assert [c.name for c in result.yanked] == ["flydsl"]
    table = result.format_table()
    assert "YANKED !!" in table
    assert f"!! YANKED: [flydsl] {WHEEL_NAME} was yanked from the index (broken ABI)" in table
    flydsl = next(c for c in result.to_json()["changes"] if c["name"] == "flydsl")
    assert (flydsl["yanked"], flydsl["yanked_reason"]) == (True, "broken ABI")
    base_json = next(c for c in result.to_json()["changes"] if c["name"] == "base")
    assert (base_json["yanked"], base_json["yanked_reason"]) == (False, None)


def test_a_yanked_wheel_is_chosen_only_when_nothing_else_fits() -> None:
    best = DistFile(filename=WHEEL_NAME, url="https://x/a.whl", sha256=None, yanked="")
    older = "flydsl-0.2.4-cp312-cp312-manylinux_2_17_x86_64.whl"
    fallback = DistFile(filename=older, url="https://x/b.whl", sha256=None)
    tags = target_tags("3.12", "x86_64")
    assert choose_wheel([best, fallback], "flydsl", "0.2.4", tags).file == fallback  # as pip ranks them
    assert choose_wheel([best], "flydsl", "0.2.4", tags).file == best


# --- git --------------------------------------------------------------------------------------


def test_two_shas_for_one_tag_is_an_error_naming_both(
    git_http: GitHttpServer, tmp_path: Path, amd64: ArchProfile
) -> None:
    git_http.refs = [(A, "HEAD"), (A, "refs/heads/main"), (B, "refs/tags/v1"), (C, "refs/tags/v1")]
    path = write(tmp_path, git_pin(git_http.url()))
    fails(
        path, amd64, rf"^\[mori\] .*: the remote lists refs/tags/v1 twice, as {B} and {C}\. Refusing to guess"
    )


def test_a_tag_both_lightweight_and_annotated_is_an_error(git_http: GitHttpServer) -> None:
    git_http.refs = [(A, "HEAD"), (B, "refs/tags/v1"), (T, "refs/tags/v1"), (C, "refs/tags/v1^{}")]
    with pytest.raises(GitError, match=rf"lists refs/tags/v1 twice, as {B} and {T}"):
        resolve_ref(git_http.url(), tag="v1", branch=None, options=GitOptions(timeout=10))


def test_a_git_timeout_kills_the_whole_process_group(silent_server: SilentServer) -> None:
    url = f"{silent_server.url}/repo"
    with pytest.raises(GitError, match=r"timed out after 1s") as e:
        resolve_ref(url, tag="v1", branch=None, options=GitOptions(timeout=1))
    assert "--timeout" in e.value.hint
    assert len(silent_server.connections) == 1  # git's http helper got that far, once: not retried
    assert processes_mentioning(f"127.0.0.1:{silent_server.port}") == []  # no orphaned git-remote-http


def test_cancelling_kills_running_git_at_once(silent_server: SilentServer) -> None:
    processes = GitProcesses()
    options_ = GitOptions(timeout=60, processes=processes)
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            resolve_ref(f"{silent_server.url}/repo", tag="v1", branch=None, options=options_)
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    silent_server.wait_for_connections(1)
    processes.kill_all()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert isinstance(outcome[0], Cancelled)
    assert processes_mentioning(f"127.0.0.1:{silent_server.port}") == []


# --- writers take turns; the write is durable -----------------------------------------------------


def lock_in_thread(
    path: Path, arch: ArchProfile, **kw: object
) -> tuple[threading.Thread, list[object], list[str]]:
    said: list[str] = []
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(lock(options(path, arch, **kw), progress=said.append))
        except Exception as e:
            outcome.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome, said


def test_a_second_writer_waits_and_reads_what_the_first_wrote(
    file_server: FileServer, tmp_path: Path, amd64: ArchProfile
) -> None:
    path = write(tmp_path, wheel_pin(file_server.add("/a.whl", WHEEL)))
    with writer_turn(path, wait=5):
        thread, outcome, said = lock_in_thread(path, amd64)
        wait_for(lambda: any("waiting for another `imagebuild lock`" in s for s in said), "the second writer")
        assert file_server.hits == {}  # it waits before reading or asking anything
        path.write_text(path.read_text(encoding="utf-8") + "# written by the first lock\n", encoding="utf-8")
    thread.join(timeout=10)
    assert isinstance(outcome[0], LockResult)
    assert outcome[0].wrote
    text = path.read_text(encoding="utf-8")
    assert "# written by the first lock" in text  # not overwritten with a stale copy
    assert 'sha256 = ""' not in text


def test_a_writer_gives_up_at_the_deadline_while_another_holds_the_file(
    file_server: FileServer, tmp_path: Path, amd64: ArchProfile
) -> None:
    path = write(tmp_path, wheel_pin(file_server.add("/a.whl", WHEEL)))
    with writer_turn(path, wait=5):
        fails(path, amd64, r"another `imagebuild lock` held \.pins\.toml\.lock", deadline=0.3)
        dry = lock(options(path, amd64, dry_run=True))  # a dry run writes nothing: it needs no turn
    assert dry.change("aiter").status == "filled"


def test_the_directory_is_fsynced_after_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "pins.toml"
    path.write_text("old\n", encoding="utf-8")
    synced: list[tuple[bool, str]] = []
    real_fsync: Callable[[int], None] = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append((stat.S_ISDIR(os.fstat(fd).st_mode), path.read_text(encoding="utf-8")))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    write_atomically(path, "new\n")
    assert synced[-1] == (True, "new\n")  # the directory, after the rename made the new file visible
