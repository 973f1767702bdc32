# mypy: ignore-errors
# (A stand-in for code that runs in the sample base image's python, not part of the typed package.)
"""Sample aiter.ops.triton.conv (missing before 0.1.19: "No module named 'aiter.ops.triton.conv'")."""


def causal_conv1d(x: list[float]) -> list[float]:
    return list(x)
