"""`imagebuild lock` end to end against local servers: policy, writes, failures."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from imagebuild.errors import ConfigError, LockError
from imagebuild.inputs.arch import ArchProfile
from imagebuild.lock import LockResult, lock
from imagebuild.pins import LockState, load_pins
from tests.lock.lock_world_support import PYPI_NAMES, WHEEL, World, committed_at, make_world
from tests.lock.repositories import GitDaemon, Registry, TokenProxy
from tests.lock.servers import FileServer, options


@pytest.fixture
def world(tmp_path: Path, git_daemon: GitDaemon, registry: Registry, file_server: FileServer) -> World:
    return make_world(tmp_path, git_daemon, registry, file_server)


def test_commit_only_pin_gets_its_commit_time(world: World, amd64: ArchProfile) -> None:
    """SOURCE_DATE_EPOCH needs every git pin's commit time: a pin without tag or branch is asked once."""
    old = world.repo.commit("an old commit, pinned by SHA")
    world.repo.commit("later work")
    world.path.write_text(
        f'[only]\nkind = "git"\nurl = "{world.repo.url}"\ncommit = "{old}"\n', encoding="utf-8"
    )
    result = world.lock(amd64)
    assert statuses(result) == {"only": "filled"}
    only = world.data()["only"]
    assert only == {
        "kind": "git",
        "url": world.repo.url,
        "commit": old,
        "committed": committed_at(world.repo, old),
        "fingerprint": only["fingerprint"],
    }
    assert load_pins(world.path).get("only").lock_state is LockState.MATCHES
    assert set(statuses(world.lock(amd64)).values()) == {"unchanged"}


def test_a_tarball_pin_is_hashed_once_and_its_edit_relocked(world: World, amd64: ArchProfile) -> None:
    """googletest's source tarball (the NIXL layer): lock downloads and hashes it while sha256 is empty."""
    body = b"googletest-1.14.0 source archive" * 100
    url = world.files.add("/google/googletest/archive/refs/tags/v1.14.0.tar.gz", body)
    world.path.write_text(
        f'[googletest]\nkind = "tarball"\nurl = "{url}"\nversion = "1.14.0"\nsha256 = ""\nsize = 0\n',
        encoding="utf-8",
    )
    assert statuses(world.lock(amd64)) == {"googletest": "filled"}
    pin = world.data()["googletest"]
    assert (pin["sha256"], pin["size"]) == (hashlib.sha256(body).hexdigest(), len(body))
    assert load_pins(world.path).get("googletest").lock_state is LockState.MATCHES
    hits = world.files.hits[urlsplit(url).path]
    assert set(statuses(world.lock(amd64)).values()) == {"unchanged"}
    assert world.files.hits[urlsplit(url).path] == hits  # a sha256 names its bytes: not asked again


def statuses(result: LockResult) -> dict[str, str]:
    return {c.name: c.status for c in result.changes}


def test_first_lock_fills_every_identity_and_keeps_comments(world: World, amd64: ArchProfile) -> None:
    result = world.lock(amd64)
    assert statuses(result) == {
        "base": "filled",
        "donor": "filled",
        "mori": "filled",
        "vllm": "filled",
        "fixed": "unchanged",
        "aiter": "filled",
        "flydsl": "filled",
        "rust": "unchanged",
    }
    assert (result.wrote, result.stale) == (True, False)
    data = world.data()
    assert data["base"]["digest"] == world.base_index
    assert data["base"]["platform_digest"] == world.base_amd64
    assert data["donor"]["digest"] == data["donor"]["platform_digest"] == world.donor_digest
    assert data["mori"]["commit"] == world.tag_commit
    assert data["vllm"]["commit"] == world.branch_commit
    assert data["mori"]["committed"] == committed_at(world.repo, world.tag_commit)
    assert data["vllm"]["committed"] == committed_at(world.repo, world.branch_commit)
    assert data["fixed"]["committed"] == "2025-12-31T23:00:00Z"  # recorded: never fetched again
    assert data["aiter"]["size"] == len(WHEEL)
    assert data["flydsl"]["filename"] == PYPI_NAMES[0]  # python 3.11 from [base]
    text = world.path.read_text(encoding="utf-8")
    for comment in ("# Every source of the image, pinned.", "# a release tag", "# force-pushed upstream"):
        assert comment in text

    before = world.path.read_bytes()
    hits = dict(world.files.hits)
    again = world.lock(amd64)
    assert set(statuses(again).values()) == {"unchanged"}
    assert (again.wrote, again.stale) == (False, False)
    assert world.path.read_bytes() == before
    # files are not re-downloaded when their identity is recorded
    assert world.files.hits == hits


def test_check_and_dry_run_write_nothing(world: World, amd64: ArchProfile) -> None:
    before = world.path.read_bytes()
    check = world.lock(amd64, check=True)
    assert (check.wrote, check.stale, check.mode) == (False, True, "check")
    dry = world.lock(amd64, dry_run=True)
    assert (dry.wrote, dry.stale) == (False, True)
    assert statuses(dry)["mori"] == "filled"
    assert "dry run" in dry.format_table()
    assert world.path.read_bytes() == before
    world.lock(amd64)
    assert world.lock(amd64, check=True).stale is False


def test_moved_tag_is_reported_loudly_and_kept_until_upgraded(world: World, amd64: ArchProfile) -> None:
    world.lock(amd64)
    before = world.path.read_bytes()
    world.repo.git("checkout", "-q", "-b", "side")  # leave branch main where it is
    elsewhere = world.repo.commit("attacker")
    world.repo.tag("v1.2.2", annotated=True, force=True)

    result = world.lock(amd64)
    mori = result.change("mori")
    assert (mori.status, mori.applied, mori.old, mori.new) == ("moved", False, world.tag_commit, elsewhere)
    assert (result.wrote, result.stale) == (False, True)
    assert world.path.read_bytes() == before
    table = result.format_table()
    assert "MOVED" in table
    assert f"was {world.tag_commit} and is now {elsewhere}" in table
    assert "-P mori" in table
    assert world.lock(amd64, check=True).stale is True

    accepted = world.lock(amd64, upgrade_pins=("mori",))
    assert accepted.change("mori").status == "moved"
    assert (accepted.wrote, accepted.stale) == (True, False)
    assert world.data()["mori"]["commit"] == elsewhere


def test_branch_that_moved_on_is_updated_only_on_upgrade(world: World, amd64: ArchProfile) -> None:
    world.lock(amd64)
    new = world.repo.commit("next")
    kept = world.lock(amd64)
    assert (kept.change("vllm").status, kept.change("vllm").applied, kept.stale) == ("updated", False, True)
    assert world.data()["vllm"]["commit"] == world.branch_commit
    upgraded = world.lock(amd64, upgrade=True)
    assert upgraded.change("vllm").status == "updated"
    assert world.data()["vllm"]["commit"] == new
    assert upgraded.stale is False


def test_image_tag_pushed_again_is_moved(world: World, amd64: ArchProfile) -> None:
    world.lock(amd64)
    new = world.registry.push_single(f"{world.image_repo}/donor", "release", salt="rebuilt")
    result = world.lock(amd64)
    assert result.change("donor").status == "moved"
    assert world.data()["donor"]["digest"] == world.donor_digest
    world.lock(amd64, upgrade_pins=("donor",))
    assert world.data()["donor"]["digest"] == world.data()["donor"]["platform_digest"] == new


def test_wheel_rehashed_only_on_upgrade_and_new_bytes_are_moved(world: World, amd64: ArchProfile) -> None:
    world.lock(amd64)
    path = next(p for p in world.files.files if p.startswith("/releases/"))
    world.files.files[path] = WHEEL + b"replaced"
    quiet = world.lock(amd64)
    assert (quiet.change("aiter").status, quiet.change("aiter").checked) == ("unchanged", False)
    assert "not re-hashed" in quiet.format_table()
    upgraded = world.lock(amd64, upgrade=True)
    assert upgraded.change("aiter").status == "moved"
    assert world.data()["aiter"]["size"] == len(WHEEL) + len(b"replaced")
    assert upgraded.change("flydsl").status == "unchanged"


def test_unknown_upgrade_pin_suggests(world: World, amd64: ArchProfile) -> None:
    with pytest.raises(ConfigError, match=r"no pin named 'mory'\. Perhaps you meant 'mori'"):
        world.lock(amd64, upgrade_pins=("mory",))


def test_every_failure_is_reported_at_once_and_the_file_is_untouched(
    world: World, amd64: ArchProfile
) -> None:
    text = world.path.read_text(encoding="utf-8")
    text = text.replace('tag = "v1.2.2"', 'tag = "v9.9.9"').replace('tag = "release"', 'tag = "gone"')
    text = text.replace("/releases/amd_aiter", "/nowhere/amd_aiter")
    world.path.write_text(text, encoding="utf-8")
    before = world.path.read_bytes()
    with pytest.raises(LockError) as e:
        world.lock(amd64)
    message = str(e.value)
    assert message.startswith("3 of 6 source(s) could not be resolved")
    assert "left untouched" in message
    assert "[donor] http://127.0.0.1:" in message
    assert "HTTP 404" in message
    assert "[mori] git://127.0.0.1:" in message
    assert "tag 'v9.9.9' not found" in message
    assert "[aiter] http://127.0.0.1:" in message
    assert world.path.read_bytes() == before


def test_ctrl_c_mid_lock_leaves_the_file_untouched(world: World, amd64: ArchProfile) -> None:
    before = world.path.read_bytes()

    def interrupt(message: str) -> None:
        if message.startswith("["):  # the first source answered
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        lock(options(world.path, amd64), progress=interrupt)
    assert world.path.read_bytes() == before
    assert sorted(p.name for p in world.path.parent.iterdir()) == [".pins.toml.lock", "pins.toml"]


def test_sources_are_resolved_concurrently(world: World, amd64: ArchProfile) -> None:
    extra = "".join(
        f'''
[wheel{i}]
kind = "wheel"
url = "{world.files.add(f"/w{i}.whl", WHEEL + bytes([i]))}"
version = "1"
sha256 = ""
size = 0
'''
        for i in range(6)
    )
    world.path.write_text(world.path.read_text(encoding="utf-8") + extra, encoding="utf-8")
    world.files.delay = 0.3  # long enough for requests to overlap when they are sent at once
    world.lock(amd64, jobs=2, dry_run=True)
    assert world.files.most_busy <= 2  # bounded by --jobs
    world.files.most_busy = 0
    world.lock(amd64, jobs=8)
    # 8 answers from the slow server (6 wheels + aiter + the index page), several at once
    assert world.files.most_busy > 2
    assert set(world.data()["wheel5"]) >= {"sha256", "size"}


def test_json_report(world: World, amd64: ArchProfile) -> None:
    report = world.lock(amd64, dry_run=True).to_json()
    json.dumps(report)
    assert report["mode"] == "dry-run"
    mori = next(c for c in report["changes"] if c["name"] == "mori")
    assert mori["new_fields"] == {
        "commit": world.tag_commit,
        "tag_object": world.repo.git("rev-parse", "v1.2.2"),  # annotated: its own object too
        "committed": committed_at(world.repo, world.tag_commit),
    }
    assert mori["status"] == "filled"


# --- annotated tags, as the real MoRI v1.2.2 is ------------------------------------------------


def test_an_annotated_tag_records_its_commit_and_its_tag_object(world: World, amd64: ArchProfile) -> None:
    world.lock(amd64)
    mori = world.data()["mori"]
    tag_object = world.repo.git("rev-parse", "v1.2.2")
    assert tag_object != world.tag_commit
    assert (mori["commit"], mori["tag_object"]) == (world.tag_commit, tag_object)
    assert "tag_object" not in world.data()["vllm"]  # a branch has none
    assert world.lock(amd64).change("mori").status == "unchanged"


def test_a_pinned_tag_object_is_normalised_not_moved(world: World, amd64: ArchProfile) -> None:
    """MAD's Dockerfile, so the real pins.toml, pins MoRI v1.2.2 by its tag object."""
    tag_object = world.repo.git("rev-parse", "v1.2.2")
    text = world.path.read_text(encoding="utf-8")
    world.path.write_text(
        text.replace('tag = "v1.2.2"\ncommit = ""', f'tag = "v1.2.2"\ncommit = "{tag_object}"'),
        encoding="utf-8",
    )
    result = world.lock(amd64)  # no -P
    change = result.change("mori")
    assert (change.status, change.applied) == ("normalized", True)
    assert not result.moved
    assert (
        f"{tag_object} is the tag object of tag v1.2.2: recorded as the commit it points at, {world.tag_commit}"
        in result.format_table()
    )
    mori = world.data()["mori"]
    assert (mori["commit"], mori["tag_object"]) == (world.tag_commit, tag_object)
    assert mori["committed"] == committed_at(world.repo, world.tag_commit)


def test_a_commit_only_pin_of_a_tag_object_is_normalised(world: World, amd64: ArchProfile) -> None:
    tag_object = world.repo.git("rev-parse", "v1.2.2")
    world.path.write_text(
        f'[only]\nkind = "git"\nurl = "{world.repo.url}"\ncommit = "{tag_object}"\n', encoding="utf-8"
    )
    assert world.lock(amd64).change("only").status == "normalized"
    assert (world.data()["only"]["commit"], world.data()["only"]["tag_object"]) == (
        world.tag_commit,
        tag_object,
    )


def test_a_retagged_annotated_tag_on_the_same_commit_is_moved(world: World, amd64: ArchProfile) -> None:
    world.lock(amd64)
    world.repo.git("tag", "-f", "-a", "-m", "retagged", "v1.2.2", world.tag_commit)
    result = world.lock(amd64)
    assert (result.change("mori").status, result.change("mori").applied) == ("moved", False)


def test_pypi_pin_needs_a_base_python(world: World, amd64: ArchProfile) -> None:
    world.path.write_text(
        world.path.read_text(encoding="utf-8").replace("[base]", "[base_image]"), encoding="utf-8"
    )
    with pytest.raises(LockError, match=r"\[flydsl\] .*no target python"):
        world.lock(amd64)


@pytest.mark.parametrize(
    ("behaviour", "cause"),
    [
        ("500", r"HTTP 500 .*\(after 3 attempts\)"),
        ("hang", r"timed out after 0\.3s"),
        ("cut", "connection dropped before the whole body arrived"),
    ],
)
def test_download_failures_leave_the_file_untouched(
    world: World, amd64: ArchProfile, behaviour: str, cause: str
) -> None:
    path = next(p for p in world.files.files if p.startswith("/releases/"))
    if behaviour == "500":
        world.files.fail_first[path] = 99
    elif behaviour == "hang":
        world.files.hang.add(path)
    else:
        world.files.cut.add(path)
    before = world.path.read_bytes()
    with pytest.raises(LockError, match=rf"\[aiter\] http://127\.0\.0\.1:\d+{path}: {cause}"):
        world.lock(amd64, timeout=0.3)
    assert world.path.read_bytes() == before


def test_private_registry_credentials_come_from_the_docker_config(
    world: World,
    amd64: ArchProfile,
    registry: Registry,
    token_registry: TokenProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    digest = registry.push_single("locked/base", "ci")
    token_registry.private["locked/"] = "robot:hunter2"
    text = world.path.read_text(encoding="utf-8")
    text = text.replace(f"{registry.host}/{world.image_repo}/base", f"{token_registry.host}/locked/base")
    world.path.write_text(text, encoding="utf-8")
    before = world.path.read_bytes()
    with pytest.raises(LockError, match=r"\[base\] .*/token\?.*refused anonymous access.*docker login"):
        world.lock(amd64)
    assert world.path.read_bytes() == before

    config = world.path.parent / "docker"
    config.mkdir()
    auth = base64.b64encode(b"robot:hunter2").decode()
    (config / "config.json").write_text(json.dumps({"auths": {token_registry.host: {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    world.lock(amd64)
    assert world.data()["base"]["digest"] == digest
