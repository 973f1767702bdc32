# mypy: ignore-errors
# (A stand-in for code that runs in the sample base image's python, not part of the typed package.)
"""Sample MoRI 1.2.2: builds only under the conditions the real one needs, and fails the way it fails."""

import os
from pathlib import Path

import setuptools
from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


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
        super().run()


setup(
    name="amd-mori",
    version="1.2.2",
    description="Sample stand-in for MoRI (not the real project)",
    packages=["mori", "mori.io", "mori.ops"],
    python_requires=">=3.9",
    cmdclass={"build_py": CheckedBuild},
)
