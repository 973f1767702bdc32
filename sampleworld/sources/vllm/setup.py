# mypy: ignore-errors
# (A stand-in for code that runs in the sample base image's python, not part of the typed package.)
"""Sample vLLM fork: reads its build environment the way the real setup.py does, and checks it."""

import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# The real setup.py does this too: a MAX_JOBS that does not reach the build subprocess dies here with
# "ValueError: invalid literal for int() with base 10: ''".
MAX_JOBS = int(os.environ.get("MAX_JOBS", ""))
NVCC_THREADS = os.environ.get("NVCC_THREADS", "")
ARCH = os.environ.get("PYTORCH_ROCM_ARCH", "")
TARGET = os.environ.get("VLLM_TARGET_DEVICE", "")

# The Kimi-K3 images: MI300X/MI325X (gfx942) and MI355X (gfx950), one compile target per image.
K3_ARCHES = ("gfx942", "gfx950")
if ARCH not in K3_ARCHES:
    # The base image sets PYTORCH_ROCM_ARCH="gfx90a;gfx942;gfx950"; an ARG of the same name is shadowed
    # by it, and the real vLLM then compiles for all three instead of the one the build asked for.
    raise RuntimeError(
        f"vLLM would compile for {ARCH} (sample vLLM: this image must target exactly one of {', '.join(K3_ARCHES)})"
    )
if TARGET != "rocm":
    raise RuntimeError(f"sample vLLM: VLLM_TARGET_DEVICE={TARGET!r}; this image must build for rocm")


class RecordBuildEnv(build_py):
    """Writes what the compile would have used, so image checks can read it back."""

    def run(self) -> None:
        super().run()
        info = f"PYTORCH_ROCM_ARCH = {ARCH!r}\nMAX_JOBS = {MAX_JOBS!r}\nNVCC_THREADS = {NVCC_THREADS!r}\n"
        (Path(self.build_lib) / "vllm" / "_build_info.py").write_text(info, encoding="utf-8")


setup(
    name="vllm",
    version="0.11.1+k3.wideep",
    description="Sample stand-in for the vLLM Kimi-K3 fork (not the real project)",
    packages=["vllm", "vllm.entrypoints", "vllm.entrypoints.cli"],
    # The real fork's console script: `vllm serve ...` (vllm/entrypoints/cli/main.py).
    entry_points={"console_scripts": ["vllm = vllm.entrypoints.cli.main:main"]},
    python_requires=">=3.9",
    cmdclass={"build_py": RecordBuildEnv},
)
