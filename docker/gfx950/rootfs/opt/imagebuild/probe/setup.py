"""Records the setuptools version of the build environment pip gave this build."""

from pathlib import Path

import setuptools
from setuptools import setup

Path("imagebuild_constraint_probe.py").write_text(f'SETUPTOOLS_VERSION = "{setuptools.__version__}"\n')
setup(name="imagebuild-constraint-probe", version="1.0", py_modules=["imagebuild_constraint_probe"])
