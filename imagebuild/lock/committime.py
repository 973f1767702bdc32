"""The committer time of a pinned commit: what SOURCE_DATE_EPOCH is made of (imagebuild.pins.epoch).

``git ls-remote`` names commits but not their times, so the commit object
itself is fetched: depth 1 and ``--filter=tree:0`` bring just that object
(a few hundred bytes) into a throw-away bare repository. Servers without
filter support send the commit's trees and blobs too, which is slower but
gives the same answer. A SHA that names an annotated tag's object is peeled by
``git log``: the answer names the commit, so the lock can record that instead.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

from imagebuild.lock.git import GitOptions, run_git
from imagebuild.lock.source_errors import GitError
from imagebuild.pins import COMMIT_RE
from imagebuild.pins.epoch import format_epoch


@dataclass(frozen=True, kw_only=True)
class CommitTime:
    commit: str  # the commit itself: the pinned SHA peeled, when it named a tag object
    committed: str  # its committer time in UTC (RFC 3339), as pins.toml records it


def commit_time(url: str, sha: str, options: GitOptions) -> CommitTime:
    """The committer time of the commit ``sha`` names (``sha`` itself, or the commit of a tag object)."""

    def git(*args: str) -> str:
        return run_git(args, url=url, timeout=options.command_timeout(url), processes=options.processes)

    with tempfile.TemporaryDirectory(prefix="imagebuild-commit-") as repo:
        git("init", "--quiet", "--bare", repo)
        git("-C", repo, "fetch", "--quiet", "--depth=1", "--filter=tree:0", "--", url, sha)
        out = git("-C", repo, "log", "-1", "--format=%H %ct", sha).strip()
    commit, _, seconds = out.partition(" ")
    if not (COMMIT_RE.fullmatch(commit) and seconds.isdigit()):
        raise GitError(
            url, f"no committer time for {sha} (git log printed {out!r})", "Check the pinned commit"
        )
    return CommitTime(commit=commit, committed=format_epoch(int(seconds)))
