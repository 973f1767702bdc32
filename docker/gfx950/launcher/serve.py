#!/usr/bin/env python3
"""Start one node of a multi-node vLLM deployment from a model recipe (see `serve.py --help`).

The entry point of the launcher package beside this file. In the image it runs as a script,
`python3 /opt/imagebuild/launcher/serve.py`, where imagebuild itself is not installed: the package
is then loaded from this file's directory under a name of its own, so it works wherever the
directory is copied, on the image's python3 (3.11 or later) with the standard library only.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

# The package's name when this file runs as a script. Its modules import each other relatively, so
# the same files work as `imagebuild.launcher` in the checkout and under this name in the image.
STANDALONE_PACKAGE = "imagebuild_launcher"


def _load_standalone_package() -> str:
    here = Path(__file__).resolve().parent
    spec = importlib.util.spec_from_file_location(
        STANDALONE_PACKAGE, here / "__init__.py", submodule_search_locations=[str(here)]
    )
    if spec is None or spec.loader is None:
        msg = f"cannot load the launcher package from {here}"
        raise ImportError(msg)
    package = importlib.util.module_from_spec(spec)
    sys.modules[STANDALONE_PACKAGE] = package
    spec.loader.exec_module(package)
    return STANDALONE_PACKAGE


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    package = __package__ or _load_standalone_package()
    code: int = importlib.import_module(f"{package}.cli").main(argv, environ)
    return code


if __name__ == "__main__":
    sys.exit(main())
