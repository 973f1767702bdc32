# mypy: ignore-errors
# (A stand-in for code that runs in the sample base image's python, not part of the typed package.)
"""Sample vLLM fork (Kimi-K3 wide-EP disaggregation branch)."""

__version__ = "0.11.1+k3.wideep"

try:
    from vllm._build_info import MAX_JOBS, NVCC_THREADS, PYTORCH_ROCM_ARCH
except ImportError:  # running from a source tree, not an installed build
    PYTORCH_ROCM_ARCH, MAX_JOBS, NVCC_THREADS = "", 0, ""

__all__ = ["MAX_JOBS", "NVCC_THREADS", "PYTORCH_ROCM_ARCH", "__version__"]
