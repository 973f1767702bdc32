# mypy: ignore-errors
# (A stand-in for code that runs in the sample base image's python, not part of the typed package.)
"""Sample AITER 0.1.19 (release wheel): the first version with aiter.ops.triton.conv.

Importing it needs a GPU, as importing the real AITER does: the real one asks the device for its gfx
arch when it is imported and fails on a host without one, such as a build host. So a build step that
imports AITER, instead of checking its metadata and file list, fails here as it would for real.
"""

import os

_GPU_DEVICE = "/dev/kfd"
if not os.path.exists(_GPU_DEVICE):
    raise RuntimeError(
        f"aiter: no AMD GPU found ({_GPU_DEVICE} is missing): cannot detect the gfx arch to load kernels for"
    )

__version__ = "0.1.19"
K3_TUNED = False
