"""Resolve git tags and branches to commits with ``git ls-remote``.

git itself speaks every URL scheme (https, ssh, git://, file://) and uses the
user's credential helpers, so the lock shells out to it instead of talking to
any forge's API. Every git call goes through :func:`run_git`: found with
shutil.which, a timeout, no terminal prompts (a lock must fail, not hang on a
password prompt), and an error that names the command and the cause.
"""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from imagebuild.lock.http import Cancelled


class GitError(Exception):
    """A git command failed: the URL, the cause and what to check."""

    def __init__(self, url: str, cause: str, hint: str, *, transient: bool = False) -> None:
        super().__init__(f"{url}: {cause}. {hint}")
        self.url = url
        self.cause = cause
        self.hint = hint
        self.transient = transient


@dataclass(frozen=True, kw_only=True)
class RefResolution:
    commit: str
    ref: str  # the full ref that matched, e.g. refs/tags/v1.2.2
    annotated: bool  # an annotated tag, peeled to its commit


# (substring of git's stderr, cause, hint, transient?)
_GIT_FAILURES: tuple[tuple[tuple[str, ...], str, str, bool], ...] = (
    (
        (
            "could not resolve host",
            "name or service not known",
            "unable to look up",
            "temporary failure in name",
        ),
        "DNS lookup failed",
        "Check the host in the pin's url and the network/DNS configuration",
        False,
    ),
    (
        ("ssl", "certificate", "gnutls"),
        "TLS error",
        "Check the server certificate and the system CA store (GIT_SSL_CAINFO)",
        False,
    ),
    (
        (
            "authentication failed",
            "could not read username",
            "terminal prompts disabled",
            "permission denied",
            "returned error: 401",
            "returned error: 403",
        ),
        "authentication required or refused",
        "The repository may be private or renamed: check the url and your git credentials",
        False,
    ),
    (
        (
            "repository not found",
            "does not appear to be a git repository",
            "not exported",
            "no such repository",
            "returned error: 404",
        ),
        "repository not found",
        "Check the url in pins.toml",
        False,
    ),
    (
        ("connection refused",),
        "connection refused",
        "Check that the server is up and the host/port in the url are right",
        False,
    ),
    (
        ("connection reset", "early eof", "rpc failed", "returned error: 5", "timed out", "broken pipe"),
        "connection failed",
        "Retry; if it persists check the network and the server",
        True,
    ),
)


def git_env() -> dict[str, str]:
    env = dict(os.environ)
    env["GIT_TERMINAL_PROMPT"] = "0"  # fail instead of waiting for a password
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    env["LC_ALL"] = "C"  # stderr is classified by its English text
    return env


def run_git(args: Sequence[str], *, url: str, timeout: float) -> str:
    """Run ``git ARGS`` and return stdout; GitError on failure or timeout."""
    git = shutil.which("git")
    if git is None:
        raise GitError(url, "git is not installed", "Install git and make sure it is on PATH")
    cmd = [git, *args]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=git_env(), check=False
        )
    except subprocess.TimeoutExpired as e:
        raise GitError(
            url,
            f"`git {' '.join(args)}` timed out after {timeout:g}s",
            "The server is slow or unreachable: retry, or raise --timeout",
            transient=True,
        ) from e
    if proc.returncode != 0:
        stderr = proc.stderr.strip()
        cause, hint, transient = classify_git_failure(stderr)
        last = stderr.splitlines()[-1] if stderr else f"exit status {proc.returncode}"
        raise GitError(url, f"{cause} (`git {args[0]}`: {last})", hint, transient=transient)
    return proc.stdout


def classify_git_failure(stderr: str) -> tuple[str, str, bool]:
    text = stderr.lower()
    for needles, cause, hint, transient in _GIT_FAILURES:
        if any(n in text for n in needles):
            return cause, hint, transient
    return "git failed", "Check the url in pins.toml and run `git ls-remote URL` by hand", False


def ls_remote(
    url: str,
    patterns: Sequence[str],
    *,
    timeout: float,
    attempts: int = 3,
    backoff: float = 0.25,
    cancel: threading.Event | None = None,
) -> dict[str, str]:
    """{full ref name: sha} for the refs matching ``patterns`` (all when empty)."""
    for attempt in range(1, attempts + 1):
        if cancel is not None and cancel.is_set():
            raise Cancelled
        try:
            out = run_git(["ls-remote", "--", url, *patterns], url=url, timeout=timeout)
        except GitError as e:
            if e.transient and attempt < attempts:
                # Wake early on Ctrl-C instead of sleeping out the backoff.
                if (cancel or threading.Event()).wait(backoff * 2 ** (attempt - 1)):
                    raise Cancelled from e
                continue
            raise
        refs: dict[str, str] = {}
        for line in out.splitlines():
            sha, _, ref = line.partition("\t")
            if ref:
                refs[ref] = sha
        return refs
    msg = "unreachable"
    raise AssertionError(msg)  # pragma: no cover


def resolve_ref(
    url: str,
    *,
    tag: str | None,
    branch: str | None,
    timeout: float,
    cancel: threading.Event | None = None,
) -> RefResolution:
    """The commit a tag (peeled) or branch names on the remote.

    Both refs/tags/NAME and refs/heads/NAME are asked for: a name that is both
    is ambiguous and refused rather than guessed, and a tag pin whose name
    exists only as a branch (or the reverse) gets a message saying so.
    """
    name = tag or branch
    if not name:
        msg = "resolve_ref needs a tag or a branch"
        raise ValueError(msg)
    tag_ref, head_ref = f"refs/tags/{name}", f"refs/heads/{name}"
    refs = ls_remote(url, [tag_ref, f"{tag_ref}^{{}}", head_ref], timeout=timeout, cancel=cancel)
    has_tag, has_head = tag_ref in refs, head_ref in refs
    if has_tag and has_head:
        raise GitError(
            url,
            f"'{name}' names both a tag ({refs[tag_ref][:12]}) and a branch ({refs[head_ref][:12]})",
            "Refusing to guess: rename one upstream, or pin the commit directly",
        )
    wanted, other = ("tag", "branch") if tag else ("branch", "tag")
    found = has_tag if tag else has_head
    if not found:
        if has_tag or has_head:
            raise GitError(
                url,
                f"{wanted} '{name}' not found, but a {other} of that name exists",
                f'Set `{other} = "{name}"` instead of `{wanted}` in pins.toml if that is what you mean',
            )
        raise GitError(url, f"{wanted} '{name}' not found", _suggest_ref(url, name, wanted, timeout=timeout))
    if tag:
        peeled = refs.get(f"{tag_ref}^{{}}")
        return RefResolution(commit=peeled or refs[tag_ref], ref=tag_ref, annotated=peeled is not None)
    return RefResolution(commit=refs[head_ref], ref=head_ref, annotated=False)


def _suggest_ref(url: str, name: str, wanted: str, *, timeout: float) -> str:
    """'Perhaps you meant ...' from the remote's refs; best effort."""
    flag = "--tags" if wanted == "tag" else "--heads"
    try:
        out = run_git(["ls-remote", flag, "--", url], url=url, timeout=timeout)
    except GitError:
        return "Check the name in pins.toml"
    prefix = "refs/tags/" if wanted == "tag" else "refs/heads/"
    names = {line.partition("\t")[2].removeprefix(prefix).removesuffix("^{}") for line in out.splitlines()}
    close = difflib.get_close_matches(name, sorted(names), n=3)
    if close:
        return f"Perhaps you meant {', '.join(repr(c) for c in close)}? Check the name in pins.toml"
    return f"Check the name in pins.toml (`git ls-remote {flag} {url}` lists them)"
