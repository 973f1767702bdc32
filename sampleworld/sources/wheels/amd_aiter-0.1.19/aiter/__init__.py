"""Sample AITER 0.1.19 (release wheel): the first version with aiter.ops.triton.conv."""

__version__ = "0.1.19"
K3_TUNED = False
