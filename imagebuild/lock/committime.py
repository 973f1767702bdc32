"""The committer time of a pinned commit: what SOURCE_DATE_EPOCH is made of (imagebuild.pins.epoch).

``git ls-remote`` names commits but not their times, so the commit object
itself is fetched: depth 1 and ``--filter=tree:0`` bring just that object
(a few hundred bytes) into a throw-away bare repository. Servers without
filter support send the commit's trees and blobs too, which is slower but
gives the same answer.
"""

from __future__ import annotations

import tempfile

from imagebuild.lock.git import GitOptions, run_git
from imagebuild.lock.source_errors import GitError
from imagebuild.pins.epoch import format_epoch


def commit_time(url: str, commit: str, options: GitOptions) -> str:
    """``commit``'s committer time in UTC (RFC 3339), as pins.toml records it."""

    def git(*args: str) -> str:
        return run_git(args, url=url, timeout=options.command_timeout(url), processes=options.processes)

    with tempfile.TemporaryDirectory(prefix="imagebuild-commit-") as repo:
        git("init", "--quiet", "--bare", repo)
        git("-C", repo, "fetch", "--quiet", "--depth=1", "--filter=tree:0", "--", url, commit)
        out = git("-C", repo, "log", "-1", "--format=%ct", commit).strip()
    if not out.isdigit():
        raise GitError(
            url, f"no committer time for {commit} (git log printed {out!r})", "Check the pinned commit"
        )
    return format_epoch(int(out))
