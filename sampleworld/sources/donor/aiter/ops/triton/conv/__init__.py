# mypy: ignore-errors
# (A stand-in for code that runs in the sample base image's python, not part of the typed package.)
"""Sample aiter.ops.triton.conv (donor)."""


def causal_conv1d(x: list[float]) -> list[float]:
    return list(x)
