"""imagebuild: reproducible builds of the Kimi-K3 vLLM serving image for AMD MI300X."""

__version__ = "0.1.0"
