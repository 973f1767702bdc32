# mypy: ignore-errors
# (A stand-in for code that runs in the sample base image's python, not part of the typed package.)
"""Sample MoRI EP all-to-all ops."""


def dispatch(tokens: list[int]) -> list[int]:
    return list(tokens)


def kernel_checksum() -> int:
    """XOR of every kernel set's checksum, computed by the C++ library the build compiled (csrc/kernels.cpp)."""
    import ctypes
    from pathlib import Path

    library = ctypes.CDLL(str(Path(__file__).resolve().parent.parent / "libmori_kernels.so"))
    total = 0
    for number in range(6):
        entry = getattr(library, f"mori_kernel_set_{number}")
        entry.restype = ctypes.c_uint64
        total ^= entry()
    return total
