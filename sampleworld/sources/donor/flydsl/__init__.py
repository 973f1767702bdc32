# mypy: ignore-errors
# (A stand-in for code that runs in the sample base image's python, not part of the typed package.)
"""Sample flydsl 0.2.2 as the donor image ships it (code only, no dist-info)."""

__version__ = "0.2.2"
