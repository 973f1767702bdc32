"""The one error hierarchy of imagebuild.

Every error raised on purpose is an ImageBuildError. Its message names the
file, key, step or command at fault and what to do next; ``cli.main`` prints it
on one line and exits with ``exit_code``. Anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations


class ImageBuildError(Exception):
    """Base of every error imagebuild reports to the user."""

    exit_code = 1


class ConfigError(ImageBuildError):
    """Bad input: pins.toml, stages/, an arch profile, constraints/ or an argument."""

    exit_code = 2


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

    exit_code = 3


class UnknownImageError(EngineError):
    """The engine has no image of the name or ID a command was given: the user's input, so exit 2."""

    exit_code = 2


class BuildError(ImageBuildError):
    """A build step failed; nothing was tagged."""

    exit_code = 4


class LockError(ImageBuildError):
    """A source could not be resolved; pins.toml was left untouched."""

    exit_code = 5


class VerifyError(ImageBuildError):
    """The image failed its smoke checks."""

    exit_code = 6


class IntegrityError(ImageBuildError):
    """An archive does not match its manifest (sha256, size, image ID); nothing was tagged."""

    exit_code = 7


class RegistryError(ImageBuildError):
    """A registry is unreachable or refused a push or pull (credentials, insecure HTTP)."""

    exit_code = 8


class AttestationError(ImageBuildError):
    """The image was built and tagged, but its SBOM or provenance could not be made."""

    exit_code = 9
