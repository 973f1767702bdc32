# mypy: ignore-errors
# (A stand-in for code that runs in the sample base image's python, not part of the typed package.)
"""Sample AITER 0.1.19 (release wheel): the first version with aiter.ops.triton.conv."""

__version__ = "0.1.19"
K3_TUNED = False
