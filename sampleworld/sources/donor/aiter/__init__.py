# mypy: ignore-errors
# (A stand-in for code that runs in the sample base image's python, not part of the typed package.)
"""Sample AITER from the donor image: K3-aware, same version string as the release wheel."""

__version__ = "0.1.19"
K3_TUNED = True
