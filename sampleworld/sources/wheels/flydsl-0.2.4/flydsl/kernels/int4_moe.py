# mypy: ignore-errors
# (A stand-in for code that runs in the sample base image's python, not part of the typed package.)
"""Sample int4 MoE kernel module, new in 0.2.4 (the donor's 0.2.2 lacks it)."""


def situv2_a8w4(m: int) -> str:
    return f"situv2_a8w4_m{m}"
