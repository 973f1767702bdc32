# mypy: ignore-errors
# (A stand-in for code that runs in the sample base image's python, not part of the typed package.)
"""Sample MoRI 1.2.2: builds only under the conditions the real one needs, and fails the way it fails."""

import importlib.metadata
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import setuptools
from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# pyproject.toml's build-system.requires, by distribution name: what the build uses and records.
BUILD_REQUIRES = ("setuptools", "setuptools-scm", "wheel", "ninja", "cmake", "pybind11", "Cython")
BUILD_RECORD = "_build_requires.txt"  # in the package: the exact versions this build used
KERNEL_SETS = 6  # csrc/kernels.cpp compiled once per set: about a second each at -O2
KERNEL_LIBRARY = "libmori_kernels.so"


def _compile_kernels(package: Path) -> None:
    """MoRI's C++ kernels as one shared library, compiled the way its CMake build compiles them.

    ccache is the compiler launcher when it is on PATH (CMAKE_CXX_COMPILER_LAUNCHER, as vLLM's build
    sets it too), so the compile cache of the image's build applies. Paths are relative to the source
    tree and the compiler runs there: the debug info names csrc/kernels.cpp and the tree's directory
    (/tmp/mori in the image), the same on every build host.
    """
    launcher = ["ccache"] if shutil.which("ccache") else []
    compiler = [*launcher, os.environ.get("CXX", "c++"), "-std=c++17", "-O2", "-g", "-fPIC", "-ftemplate-depth=5000"]
    objects = Path("build") / "kernels"
    (HERE / objects).mkdir(parents=True, exist_ok=True)

    def compile_set(number: int) -> str:
        target = str(objects / f"set{number}.o")
        command = [*compiler, f"-DMORI_KERNEL_SET={number}", "-c", "csrc/kernels.cpp", "-o", target]
        subprocess.run(command, check=True, cwd=HERE)
        return target

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        compiled = list(pool.map(compile_set, range(KERNEL_SETS)))
    link = [os.environ.get("CXX", "c++"), "-shared", "-o", str(package / KERNEL_LIBRARY), *compiled]
    subprocess.run(link, check=True, cwd=HERE)


def _use_build_tools(scratch: Path) -> str:
    """Do with each build dependency what the real build does with it; returns the version setuptools_scm gives.

    The real MoRI runs CMake with the Ninja generator from the build environment, compiles pybind11
    bindings, cythonizes its cco module and writes its version with setuptools_scm.
    """
    import cmake
    import ninja
    import pybind11
    import setuptools_scm
    from Cython.Compiler.Main import compile as cythonize

    for tool in (Path(cmake.CMAKE_BIN_DIR) / "cmake", Path(ninja.BIN_DIR) / "ninja"):
        subprocess.run([str(tool), "--version"], check=True, capture_output=True)
    if not (Path(pybind11.get_include()) / "pybind11" / "pybind11.h").is_file():
        raise RuntimeError("sample MoRI: pybind11's headers are missing from its build environment")
    pyx = scratch / "cco.pyx"
    pyx.write_text("def rank(int r):\n    return r\n")
    cythonize(str(pyx))
    if not (scratch / "cco.c").is_file():
        raise RuntimeError("sample MoRI: Cython did not translate cco.pyx")
    return setuptools_scm.get_version(root=str(HERE), fallback_version="1.2.2")


class CheckedBuild(build_py):
    """The real failure comes from MoRI's build_ext on setuptools >= 80; a build-time check stands in."""

    def run(self) -> None:
        major = int(setuptools.__version__.split(".")[0])
        if major >= 80:
            raise AssertionError(
                "run() must precede build_extension() "
                f"[sample MoRI: built with setuptools {setuptools.__version__}; needs setuptools<80]"
            )
        if not (HERE / "3rdparty" / "umbp" / "UMBP_VERSION").is_file():
            raise RuntimeError(
                "sample MoRI: 3rdparty/umbp is not checked out; clone with --recursive "
                "or run `git submodule update --init --recursive`"
            )
        if os.environ.get("BUILD_UMBP") != "OFF":
            raise RuntimeError(
                f"sample MoRI: BUILD_UMBP={os.environ.get('BUILD_UMBP')!r}; this build needs BUILD_UMBP=OFF"
            )
        with tempfile.TemporaryDirectory() as scratch:
            scm_version = _use_build_tools(Path(scratch))
        super().run()
        package = Path(self.build_lib).resolve() / "mori"
        _compile_kernels(package)
        (package / "_version.py").write_text(f"__version__ = {scm_version!r}\n")
        used = "".join(f"{name}=={importlib.metadata.version(name)}\n" for name in BUILD_REQUIRES)
        (package / BUILD_RECORD).write_text(used)


setup(
    name="amd-mori",
    version="1.2.2",
    description="Sample stand-in for MoRI (not the real project)",
    packages=["mori", "mori.io", "mori.ops"],
    python_requires=">=3.9",
    cmdclass={"build_py": CheckedBuild},
)
