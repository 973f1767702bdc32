"""The one error hierarchy of imagebuild.

Every error raised on purpose is an ImageBuildError. Its message names the
file, key, step or command at fault and what to do next; ``cli.main`` prints it
on one line and exits with ``exit_code``. So does an OSError of the machine's limits (a full
disk, a quota, a read-only or failing filesystem: ``MACHINE_LIMITS``), naming its file.
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import errno
from enum import IntEnum

# A machine's limits, not imagebuild's bugs: a full disk or quota, a read-only or failing filesystem.
MACHINE_LIMITS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})


def machine_limit(error: BaseException, *, where: str = "") -> str:
    """'FILE: REASON; what to do' for an OSError of the machine's limits ('' for any other error);
    ``where`` names the place when the error names no file (a write's does not)."""
    if not isinstance(error, OSError) or error.errno not in MACHINE_LIMITS:
        return ""
    place = error.filename if error.filename is not None else where
    where = f"{place}: " if place else ""
    advice = "free some space there" if error.errno in (errno.ENOSPC, errno.EDQUOT) else "check that filesystem"
    return f"{where}{error.strerror or error}; {advice} (or write elsewhere) and run it again"


class ExitCode(IntEnum):
    """Every exit status of ``imagebuild``: each verb's --help and the README show this table."""

    OK = 0
    FAILED = 1
    BAD_INPUT = 2
    NO_ENGINE = 3
    BUILD_FAILED = 4
    LOCK_FAILED = 5
    VERIFY_FAILED = 6
    INTEGRITY = 7
    REGISTRY = 8
    ATTESTATION = 9
    NORMALIZE = 10
    UNVERIFIED = 11
    INTERRUPTED = 130
    PIPE_CLOSED = 141

    @property
    def meaning(self) -> str:
        return EXIT_MEANINGS[self]


EXIT_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "done",
    ExitCode.FAILED: "render --check or lock --check found a stale file, or lock --locked a file a plain "
    "lock would change; diff: the images differ; a full disk or a read-only or failing filesystem (the "
    "file named); import: the engine's disk lacks room for the layers (the node, directory and sizes "
    "named, nothing read), or the importer's `--unpack-into DIR` lacks room for the squashfs unpacked; "
    "any other failure",
    ExitCode.BAD_INPUT: "bad input: an argument, an input file, an image the engine does not have",
    ExitCode.NO_ENGINE: "no Docker engine, or the engine refused",
    ExitCode.BUILD_FAILED: "a build step failed; nothing was tagged",
    ExitCode.LOCK_FAILED: "a source could not be resolved; pins.toml is unchanged",
    ExitCode.VERIFY_FAILED: "the image failed its smoke checks",
    ExitCode.INTEGRITY: "an archive's size, sha256 or image ID differs from its manifest",
    ExitCode.REGISTRY: "a registry is unreachable or refused the credentials, or refused the attestations "
    "publish attaches (the image itself stays pushed and tagged)",
    ExitCode.ATTESTATION: "built and tagged, but the SBOM or provenance could not be made",
    ExitCode.NORMALIZE: "built, but its timestamps could not be normalised; it is kept as TAG-cache",
    ExitCode.UNVERIFIED: "an attestation is unsigned, its signature does not verify with the key, or it "
    "names another image",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C, SIGTERM)",
    ExitCode.PIPE_CLOSED: "the reader of stdout left before the output was written (piped into head); a stdout closed from the start (`>&-`) is bad input, 2",
}


class ImageBuildError(Exception):
    """Base of every error imagebuild reports to the user."""

    exit_code: ExitCode = ExitCode.FAILED


class ConfigError(ImageBuildError):
    """Bad input: pins.toml, stages/, an arch profile, constraints/ or an argument."""

    exit_code = ExitCode.BAD_INPUT


class UnpinnedError(ConfigError):
    """A source the command needs has no immutable identity yet."""


class CommandError(ImageBuildError):
    """A subprocess could not run or failed (imagebuild.util.run); callers usually translate it."""

    def __init__(self, message: str, *, command: str, failure: str, returncode: int | None = None) -> None:
        super().__init__(message)
        self.command = command
        self.failure = failure  # imagebuild.util.run.Failure: missing, timeout or exit
        self.returncode = returncode


class EngineError(ImageBuildError):
    """The Docker engine is unreachable or refused a request."""

    exit_code = ExitCode.NO_ENGINE


class UnknownImageError(EngineError):
    """The engine has no image of the name or ID a command was given: the user's input, so exit 2."""

    exit_code = ExitCode.BAD_INPUT


class BuildError(ImageBuildError):
    """A build step failed; nothing was tagged."""

    exit_code = ExitCode.BUILD_FAILED


class LockError(ImageBuildError):
    """A source could not be resolved; pins.toml was left untouched."""

    exit_code = ExitCode.LOCK_FAILED


class VerifyError(ImageBuildError):
    """The image failed its smoke checks."""

    exit_code = ExitCode.VERIFY_FAILED


class IntegrityError(ImageBuildError):
    """An archive does not match its manifest (sha256, size, image ID); nothing was tagged."""

    exit_code = ExitCode.INTEGRITY


class RegistryError(ImageBuildError):
    """A registry is unreachable or refused a push or pull (credentials, insecure HTTP)."""

    exit_code = ExitCode.REGISTRY


class AttestationError(ImageBuildError):
    """The image was built and tagged, but its SBOM or provenance could not be made."""

    exit_code = ExitCode.ATTESTATION


class UnverifiedError(ImageBuildError):
    """An attestation does not check out: no signature, a signature the key does not verify, another subject."""

    exit_code = ExitCode.UNVERIFIED


class NormalizeError(ImageBuildError):
    """The image was built, but its timestamps could not be normalised; it is kept under its cache tag."""

    exit_code = ExitCode.NORMALIZE
