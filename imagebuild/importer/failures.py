"""What can go wrong in an import: one line each, with imagebuild's exit code for its kind.

``imagebuild import`` turns these into imagebuild's own errors by exit code
(``imagebuild.distribute.local_import``); the shipped zipapp prints them and exits with the code.
"""

EXIT_NO_ROOM, EXIT_BAD_INPUT, EXIT_NO_ENGINE, EXIT_INTEGRITY = 1, 2, 3, 7


class ImportFailure(Exception):
    """A failure reported in one line with a documented exit code."""

    exit_code = 1


class BadInput(ImportFailure):
    """A missing or malformed manifest, a missing archive."""

    exit_code = EXIT_BAD_INPUT


class EngineUnavailable(ImportFailure):
    """No Docker engine at DOCKER_HOST, or the engine refused a request."""

    exit_code = EXIT_NO_ENGINE


class IntegrityFailure(ImportFailure):
    """The archive's size, sha256 or loaded image ID differs from its manifest."""

    exit_code = EXIT_INTEGRITY


class NoRoom(ImportFailure):
    """The disk a load or an unpack writes to has less free than it needs (imagebuild's exit code for
    the machine's limits)."""

    exit_code = EXIT_NO_ROOM
