"""Render the Dockerfile: a pure function of stages, pins, arch and constraints.

Same inputs, same bytes. The output is a list of typed lines (so ``plan`` can
reason about cache order) serialised to text. Rules enforced here:

* donor stage first; ARGs consumed by a FROM declared before the first FROM;
* images by digest, git sources at a full SHA with HEAD verified, downloaded
  files checked with ``sha256sum -c``;
* every ARG declared just before its first consumer, so changing a late pin
  does not rebuild early layers (the classic builder keys each layer on the
  instructions before it);
* every pip install is hash-locked from pylock.toml, a pinned wheel or a source
  tree, resolves nothing, and gets the build-toolchain constraint that fits it;
* nothing the classic builder (docker-py) cannot parse, no secret-like ARG.

The package, along its seams:

* ``model``    the rendered Dockerfile as typed lines, and the render options;
* ``scope``    which ARGs exist, their values and owners, and which a text needs;
* ``commands`` a stage command (shell, pip, git, fetch, pypi) -> shell lines;
* ``pip``      every pip call: hash-locked sources, the build constraint, the guard;
* ``apt``      step 4's OS packages: apt.lock.toml's exact set, from the snapshot only;
* ``policy``   what may not be rendered: unpinned sources, classic-builder syntax;
* ``assemble`` the loop over the steps that puts the lines together.
"""

from imagebuild.inputs.layout import BUILD_CONSTRAINT_FILE, CONSTRAINT_FILE
from imagebuild.render.assemble import render, render_inputs
from imagebuild.render.model import (
    ConstraintMode,
    Dockerfile,
    Line,
    LineKind,
    RenderedStep,
    RenderOptions,
)
from imagebuild.render.pip import SETUPTOOLS_GUARD, build_constraint_text
from imagebuild.render.policy import check_classic_builder
from imagebuild.render.scope import check_arg_name

__all__ = [
    "BUILD_CONSTRAINT_FILE",
    "CONSTRAINT_FILE",
    "SETUPTOOLS_GUARD",
    "ConstraintMode",
    "Dockerfile",
    "Line",
    "LineKind",
    "RenderOptions",
    "RenderedStep",
    "build_constraint_text",
    "check_arg_name",
    "check_classic_builder",
    "render",
    "render_inputs",
]
