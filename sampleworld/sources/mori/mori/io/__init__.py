"""Sample MoRIIO transfer engine."""


class IOEngine:
    def __init__(self, backend: str = "rdma") -> None:
        self.backend = backend
