"""git resolution against a real `git daemon` on 127.0.0.1."""

from __future__ import annotations

import pytest

from imagebuild.lock.git import GitError, GitOptions, classify_git_failure, resolve_ref
from imagebuild.testing import free_port
from tests.lock.repositories import GitDaemon

OPTIONS = GitOptions(timeout=10)


def test_lightweight_tag_branch_and_annotated_tag(git_daemon: GitDaemon) -> None:
    repo = git_daemon.repo()
    first = repo.tag("v1.0")
    second = repo.commit("second")
    repo.tag("v2.0", annotated=True)
    repo.branch("feature")

    light = resolve_ref(repo.url, tag="v1.0", branch=None, options=OPTIONS)
    assert (light.commit, light.annotated) == (first, False)
    annotated = resolve_ref(repo.url, tag="v2.0", branch=None, options=OPTIONS)
    # the commit, not the tag object
    assert (annotated.commit, annotated.annotated) == (second, True)
    assert annotated.commit != repo.git("rev-parse", "v2.0")
    assert resolve_ref(repo.url, tag=None, branch="feature", options=OPTIONS).commit == second


def test_name_that_is_both_tag_and_branch_is_refused(git_daemon: GitDaemon) -> None:
    repo = git_daemon.repo()
    repo.tag("release")
    repo.commit("later")
    repo.branch("release")
    with pytest.raises(GitError, match=r"names both a tag .* and a branch"):
        resolve_ref(repo.url, tag="release", branch=None, options=OPTIONS)


def test_tag_that_exists_only_as_branch_says_so(git_daemon: GitDaemon) -> None:
    repo = git_daemon.repo()
    repo.branch("dev")
    with pytest.raises(GitError, match=r"tag 'dev' not found, but a branch of that name exists") as e:
        resolve_ref(repo.url, tag="dev", branch=None, options=OPTIONS)
    assert 'branch = "dev"' in e.value.hint


def test_missing_tag_suggests_close_names(git_daemon: GitDaemon) -> None:
    repo = git_daemon.repo()
    repo.tag("v1.2.2")
    with pytest.raises(GitError, match=r"tag 'v1\.2\.3' not found") as e:
        resolve_ref(repo.url, tag="v1.2.3", branch=None, options=OPTIONS)
    assert "'v1.2.2'" in e.value.hint


def test_missing_repository(git_daemon: GitDaemon) -> None:
    url = f"git://127.0.0.1:{git_daemon.port}/no-such-repo"
    with pytest.raises(GitError, match="repository not found") as e:
        resolve_ref(url, tag="v1", branch=None, options=OPTIONS)
    assert e.value.url == url


def test_server_down_is_connection_refused() -> None:
    url = f"git://127.0.0.1:{free_port()}/x"
    with pytest.raises(GitError, match="connection refused"):
        resolve_ref(url, tag="v1", branch=None, options=OPTIONS)


@pytest.mark.parametrize(
    ("stderr", "cause"),
    [
        ("fatal: unable to access 'https://x/': Could not resolve host: x", "DNS lookup failed"),
        (
            "fatal: could not read Username for 'https://github.com': terminal prompts disabled",
            "authentication",
        ),
        ("remote: Repository not found.", "repository not found"),
        ("fatal: unable to access: SSL certificate problem: unable to get local issuer", "TLS error"),
        ("error: RPC failed; curl 56 Recv failure: Connection reset by peer", "connection failed"),
    ],
)
def test_git_stderr_is_classified(stderr: str, cause: str) -> None:
    assert classify_git_failure(stderr)[0].startswith(cause)
