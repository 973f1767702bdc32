"""The parts of test_render_injection.py's property tests: the hostile values, the Dockerfile and shell
structure a render is compared by, and the checkout's inputs in a temp directory, edited and re-read."""

from __future__ import annotations

import io
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bashlex
import tomlkit
from dockerfile_parse import DockerfileParser
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from imagebuild.errors import ConfigError
from imagebuild.project import Inputs, find_project
from imagebuild.render import RenderOptions, render_inputs
from imagebuild.render.context import BuildContext, build_context
from tests import REPO

# Pieces of Dockerfile and shell syntax, and characters that end or hide a line.
NASTY = [
    "\n", "\r", "\r\n", "\x00", "\x7f", "\x1b", "\u2028", "\u0085", "\\", "\\\n", '"', "'", "`", "$",
    "$(touch /pwned)", "`touch /pwned`", "${HOME}", "$HOME", ";", "&&", "||", "|", "&", " ", "\t", "#",
    "\nRUN touch /pwned", "\n# comment", " \\\n && touch /pwned", "<<EOF", ">", "<", "*", "?", "[", "]",
    "{", "}", "(", ")", "!", "~", "%0A", "%22", "@", ":", "/", "..", "-", "=", ",", "+", ".", "x", "0",
]  # fmt: skip


def values(original: str) -> st.SearchStrategy[str]:
    """Arbitrary text, syntax pieces, and the original value with pieces spliced in (near misses)."""
    pieces = st.lists(st.sampled_from(NASTY), min_size=1, max_size=5).map("".join)
    spliced = st.tuples(pieces, st.integers(0, len(original)), pieces).map(
        lambda t: original[: t[1]] + t[0] + original[t[1] :] + t[2]
    )
    return st.one_of(st.text(max_size=40), pieces, spliced, st.just(original))


def instructions(text: str) -> list[str]:
    """The instructions in order, comments and ARGs aside: a longer title wraps onto more comment
    lines, and an env value may reference another ARG (declared before the step, see arg_names)."""
    parser = DockerfileParser(fileobj=io.BytesIO(text.encode()))
    return [item["instruction"] for item in parser.structure if item["instruction"] not in ("COMMENT", "ARG")]


def arg_names(text: str) -> set[str]:
    parser = DockerfileParser(fileobj=io.BytesIO(text.encode()))
    names = set()
    for item in parser.structure:
        if item["instruction"] == "ARG":
            name, sep, _ = item["value"].partition("=")
            assert sep, item
            assert re.fullmatch(r"[A-Z][A-Z0-9_]*", name), item
            names.add(name)
    return names


def shell_shape(command: str) -> list[Any]:
    """The structure of a shell command line: node kinds and word counts, not the words' text.

    Parameter expansions inside a word are allowed to differ (an env value may reference ${NAME});
    anything else that differs (a command substitution, an operator, a word more) is an injection.
    """

    def shape(node: Any) -> Any:
        kind = node.kind
        children = [shape(c) for c in getattr(node, "parts", []) or getattr(node, "list", [])]
        children = [c for c in children if c is not None]
        if kind in ("parameter", "tilde"):
            return None
        if kind == "word":
            return ("word", tuple(children))
        return (kind, tuple(children))

    return [shape(part) for part in bashlex.parse(command)]


def run_lines(text: str) -> list[str]:
    parser = DockerfileParser(fileobj=io.BytesIO(text.encode()))
    return [item["value"] for item in parser.structure if item["instruction"] == "RUN"]


class World:
    """The checkout's inputs in a temp directory, re-read after each edit, as the CLI reads them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for name in ("stages", "constraints"):
            shutil.copytree(REPO / name, root / name, dirs_exist_ok=True)
        for name in ("pins.toml", "pylock.toml"):
            shutil.copy(REPO / name, root / name)
        self.pristine = {p: p.read_text() for p in root.rglob("*.toml")}
        self.dirty: set[Path] = set()

    def reset(self) -> None:
        for path in self.dirty:
            path.write_text(self.pristine[path])
        self.dirty.clear()

    def edit(self, relative: str, change: Callable[[Any], None]) -> None:
        path = self.root / relative
        doc = tomlkit.parse(self.pristine[path])
        change(doc)
        self.dirty.add(path)
        path.write_text(tomlkit.dumps(doc))

    def inputs(self) -> Inputs:
        return find_project(self.root, self.root / "pins.toml").load("gfx942")

    def context(self) -> BuildContext:
        """What `imagebuild render` writes to docker/gfx942/ (and `imagebuild build` sends)."""
        inputs = self.inputs()
        options = RenderOptions(allow_unpinned=True)
        dockerfile = render_inputs(inputs, options)
        return build_context(dockerfile, inputs)

    def render(self) -> str:
        """The context's Dockerfile: the rendered steps and the closing LABEL block."""
        return self.context().dockerfile


@dataclass(frozen=True)
class Benign:
    instructions: list[str]
    args: set[str]
    runs: list[str]
    shapes: list[list[Any]]


def benign_render(world: World) -> Benign:
    text = world.render()
    runs = run_lines(text)
    return Benign(instructions(text), arg_names(text), runs, [shell_shape(run) for run in runs])


def assert_refused_or_same_structure(render_it: Callable[[], str], benign: Benign) -> bool:
    """True when rendered (and proven structurally the same), False when refused as bad input."""
    try:
        text = render_it()
    except ConfigError:
        return False
    assert instructions(text) == benign.instructions, text
    assert arg_names(text) <= benign.args, text  # no ARG the stages and pins do not define
    for i, run in enumerate(run_lines(text)):  # the instruction lists are equal: RUN i is RUN i
        if run != benign.runs[i]:  # an unchanged line has the benign shape: parse only the others
            assert shell_shape(run) == benign.shapes[i], run
    return True


PROPERTY = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
