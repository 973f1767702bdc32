# mypy: ignore-errors
# (A stand-in for code that runs in the sample base image's python, not part of the typed package.)
"""Sample MoRIIO transfer engine."""


class IOEngine:
    def __init__(self, backend: str = "rdma") -> None:
        self.backend = backend
