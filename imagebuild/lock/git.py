"""Resolve git tags and branches to commits with ``git ls-remote``.

git itself speaks every URL scheme (https, ssh, git://, file://) and uses the
user's credential helpers, so the lock shells out to it instead of talking to
any forge's API. Every git call goes through :func:`run_git`, and so through
imagebuild.util.run: found with shutil.which, a timeout, its own process group
(so a timeout or Ctrl-C kills git's network helpers too), no terminal prompts
(a lock must fail, not hang on a password prompt), and an error that names the
command and the cause.
"""

from __future__ import annotations

import difflib
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from imagebuild.errors import CommandError
from imagebuild.lock.http import DEADLINE_HINT
from imagebuild.lock.source_errors import GitError
from imagebuild.util.retry import (
    NO_DEADLINE,
    Cancelled,
    Deadline,
    RetryHook,
    RetryPolicy,
    Transient,
    retry_call,
)
from imagebuild.util.run import Failure, ProcessGroup, run_command


@dataclass(frozen=True, kw_only=True)
class RefResolution:
    commit: str
    ref: str  # the full ref that matched, e.g. refs/tags/v1.2.2
    tag_object: str | None = None  # an annotated tag's own object (refs/tags/NAME), peeled to ``commit``

    @property
    def annotated(self) -> bool:
        return self.tag_object is not None


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
        ("connection reset", "early eof", "rpc failed", "returned error: 5", "broken pipe"),
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


# The git commands of one lock: a timeout, Ctrl-C or the deadline kills them with their helpers.
GitProcesses = ProcessGroup


def run_git(args: Sequence[str], *, url: str, timeout: float, processes: GitProcesses | None = None) -> str:
    """Run ``git ARGS`` and return stdout; GitError on failure or timeout, Cancelled when ``processes`` was killed.

    On timeout, or any exception in this thread (Ctrl-C), git's whole
    process group is killed before this returns (imagebuild.util.run).
    """
    try:
        proc = run_command(["git", *args], timeout=timeout, env=git_env(), check=False, processes=processes)
    except CommandError as e:
        if e.failure == Failure.MISSING:
            raise GitError(url, "git is not installed", "Install git and make sure it is on PATH") from e
        if e.failure == Failure.CANCELLED:
            raise Cancelled from e  # killed by kill_all: the lock is being cancelled
        raise GitError(
            url,
            f"`git {' '.join(args)}` timed out after {timeout:g}s",
            "The server is slow or unreachable: retry, or raise --timeout",
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


@dataclass(frozen=True, kw_only=True)
class GitOptions:
    """How one lock runs git: timeout per command, deadline, retries, cancellation."""

    timeout: float
    deadline: Deadline = NO_DEADLINE
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    cancel: threading.Event | None = None
    processes: GitProcesses | None = None
    on_retry: RetryHook | None = None

    def command_timeout(self, url: str) -> float:
        timeout = min(self.timeout, self.deadline.remaining())
        if timeout <= 0:
            raise GitError(url, "the overall deadline passed before git ran", DEADLINE_HINT)
        return timeout


def ls_remote(url: str, patterns: Sequence[str], options: GitOptions) -> dict[str, str]:
    """{full ref name: sha} for the refs matching ``patterns`` (all when empty).

    A ref the remote lists twice with different SHAs is an error naming
    both: which one is meant is for a human to find out, not for us to guess.
    """

    def once(attempt: int) -> str:
        return run_git(
            ["ls-remote", "--", url, *patterns],
            url=url,
            timeout=options.command_timeout(url),
            processes=options.processes,
        )

    out = retry_call(
        once,
        classify=lambda e: Transient() if isinstance(e, GitError) and e.transient else None,
        policy=options.policy,
        deadline=options.deadline,
        cancel=options.cancel,
        on_retry=options.on_retry,
    )
    refs: dict[str, str] = {}
    for line in out.splitlines():
        sha, _, ref = line.partition("\t")
        if not ref:
            continue
        if refs.get(ref, sha) != sha:
            raise GitError(
                url,
                f"the remote lists {ref} twice, as {refs[ref]} and {sha}",
                "Refusing to guess which one is meant: ask the repository's maintainers, "
                "then pin the right commit",
            )
        refs[ref] = sha
    return refs


def resolve_ref(url: str, *, tag: str | None, branch: str | None, options: GitOptions) -> RefResolution:
    """The commit a tag (peeled, with its tag object when annotated) or branch names on the remote.

    Both refs/tags/NAME and refs/heads/NAME are asked for: a name that is both
    is ambiguous and refused rather than guessed, and a tag pin whose name
    exists only as a branch (or the reverse) gets a message saying so.
    """
    name = tag or branch
    if not name:
        msg = "resolve_ref needs a tag or a branch"
        raise ValueError(msg)
    tag_ref, head_ref = f"refs/tags/{name}", f"refs/heads/{name}"
    refs = ls_remote(url, [tag_ref, f"{tag_ref}^{{}}", head_ref], options)
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
        raise GitError(url, f"{wanted} '{name}' not found", _suggest_ref(url, name, wanted, options))
    if tag:
        # An annotated tag is listed twice: refs/tags/NAME is the tag object, NAME^{} the commit.
        peeled = refs.get(f"{tag_ref}^{{}}")
        if peeled is None:
            return RefResolution(commit=refs[tag_ref], ref=tag_ref)
        return RefResolution(commit=peeled, ref=tag_ref, tag_object=refs[tag_ref])
    return RefResolution(commit=refs[head_ref], ref=head_ref)


def _suggest_ref(url: str, name: str, wanted: str, options: GitOptions) -> str:
    """'Perhaps you meant ...' from the remote's refs; best effort."""
    flag = "--tags" if wanted == "tag" else "--heads"
    try:
        out = run_git(
            ["ls-remote", flag, "--", url],
            url=url,
            timeout=options.command_timeout(url),
            processes=options.processes,
        )
    except GitError:
        return "Check the name in pins.toml"
    prefix = "refs/tags/" if wanted == "tag" else "refs/heads/"
    names = {line.partition("\t")[2].removeprefix(prefix).removesuffix("^{}") for line in out.splitlines()}
    close = difflib.get_close_matches(name, sorted(names), n=3)
    if close:
        return f"Perhaps you meant {', '.join(repr(c) for c in close)}? Check the name in pins.toml"
    return f"Check the name in pins.toml (`git ls-remote {flag} {url}` lists them)"
