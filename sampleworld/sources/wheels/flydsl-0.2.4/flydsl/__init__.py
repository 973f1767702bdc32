# mypy: ignore-errors
# (A stand-in for code that runs in the sample base image's python, not part of the typed package.)
"""Sample flydsl 0.2.4: the K3 int4 SiTUv2 MoE path needs this version."""

__version__ = "0.2.4"
