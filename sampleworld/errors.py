"""The one error type of the sample world; messages name the command, file or port and the next action."""


class SampleWorldError(Exception):
    """Raised for every failure the caller can act on (a port taken, a download failed, a build broke)."""
