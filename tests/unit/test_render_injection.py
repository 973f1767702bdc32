"""No value reaches the Dockerfile as anything but the one value it is.

For arbitrary strings in any pin field, tunable, build arg, arch value, stage
env value or path, hash-locked pip command and field of pylock.toml, rendering
either refuses with exit 2 (ConfigError) or yields a Dockerfile (the committed
context's, with its closing LABEL block) whose instruction list, parsed by a
real Dockerfile parser (dockerfile-parse), is the one a benign value gives
(comments aside: a longer title wraps onto more comment lines); and every RUN
line parses (bashlex) to the same shell structure: the same commands, words,
operators and redirections, no command substitution the benign one lacks.
Build args never reach the Dockerfile's text (docker passes them to the
RUN's shell as variables): a value is refused, or its every unquoted
expansion is one plain word.
"""

from __future__ import annotations

import io
import re
import shutil
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bashlex
import pytest
import tomlkit
from dockerfile_parse import DockerfileParser
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagebuild.build.core import check_build_args
from imagebuild.errors import ConfigError
from imagebuild.inputs.layout import BUILD_CONSTRAINT_FILE, CONTEXT_ROOTFS
from imagebuild.project import Inputs, find_project
from imagebuild.render import RenderOptions, render_inputs
from imagebuild.render.context import BuildContext, build_context
from imagebuild.render.labels import label_block
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


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("world"))


@dataclass(frozen=True)
class Benign:
    instructions: list[str]
    args: set[str]
    runs: list[str]
    shapes: list[list[Any]]


def _benign_render(world: World) -> Benign:
    text = world.render()
    runs = run_lines(text)
    return Benign(instructions(text), arg_names(text), runs, [shell_shape(run) for run in runs])


@pytest.fixture(scope="module")
def benign(world: World) -> Benign:
    world.reset()
    return _benign_render(world)


@pytest.fixture(scope="module")
def benign_nixl(world: World) -> Benign:
    """The render with step 10's optional layer on (WITH_NIXL other than "0" selects its commands)."""
    world.reset()
    world.edit("stages/image.toml", lambda doc: doc["args"].__setitem__("WITH_NIXL", "1"))
    return _benign_render(world)


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


def _pin_fields() -> list[tuple[str, str]]:
    data = tomllib.loads((REPO / "pins.toml").read_text())
    return [
        (pin, key) for pin, table in data.items() for key, value in table.items() if isinstance(value, str)
    ]


PIN_FIELDS = _pin_fields()


@pytest.mark.parametrize(("pin", "key"), PIN_FIELDS, ids=[f"{p}.{k}" for p, k in PIN_FIELDS])
@PROPERTY
@given(data=st.data())
def test_any_pin_field(world: World, benign: Any, pin: str, key: str, data: st.DataObject) -> None:
    value = data.draw(values(tomllib.loads((REPO / "pins.toml").read_text())[pin][key]))

    def render_it() -> str:
        world.reset()
        world.edit("pins.toml", lambda doc: doc[pin].__setitem__(key, value))
        return world.render()

    assert_refused_or_same_structure(render_it, benign)


TUNABLES = ["MAX_JOBS", "NVCC_THREADS", "WITH_NIXL"]


@pytest.mark.parametrize("name", TUNABLES)
@PROPERTY
@given(data=st.data())
def test_any_build_arg(world: World, benign: Any, name: str, data: st.DataObject) -> None:
    """A build arg reaches each RUN as a shell variable, some expanded unquoted (-j${MAX_JOBS}):
    refused, or a value that, written in place of every ${NAME}, leaves each RUN's structure as is."""
    value = data.draw(values("32"))
    world.reset()
    try:
        check_build_args({name: value}, world.inputs())
    except ConfigError:
        return
    assert not re.search(r"[\s*?\[\]]", value), value  # no field splitting, no pathname expansion
    for i, run in enumerate(benign.runs):
        if f"${{{name}}}" in run:
            assert shell_shape(run.replace(f"${{{name}}}", value)) == benign.shapes[i], (value, run)


@pytest.mark.parametrize("name", TUNABLES)
@PROPERTY
@given(data=st.data())
def test_any_tunable_default(
    world: World, benign: Any, benign_nixl: Any, name: str, data: st.DataObject
) -> None:
    value = data.draw(values("8"))

    def render_it() -> str:
        world.reset()
        world.edit("stages/image.toml", lambda doc: doc["args"].__setitem__(name, value))
        return world.render()

    # WITH_NIXL's value also selects step 10's commands: any value but "0" renders the layer.
    assert_refused_or_same_structure(
        render_it, benign_nixl if name == "WITH_NIXL" and value != "0" else benign
    )


ARCH_KEYS = ["gfx_arch", "rocm_arch", "mori_gpu_archs", "nic_arch", "description"]


@pytest.mark.parametrize("key", ARCH_KEYS)
@PROPERTY
@given(data=st.data())
def test_any_arch_value(world: World, benign: Any, key: str, data: st.DataObject) -> None:
    value = data.draw(values("gfx942"))

    def render_it() -> str:
        world.reset()
        world.edit("stages/arch/gfx942.toml", lambda doc: doc.__setitem__(key, value))
        return world.render()

    assert_refused_or_same_structure(render_it, benign)


def _set_env(doc: Any, value: str) -> None:
    doc["env"]["BUILD_UMBP"] = value


def _set_pip_env(doc: Any, value: str) -> None:
    next(c for c in doc["commands"] if isinstance(c, dict) and "env" in c)["env"]["NVCC_THREADS"] = value


def _set_into(doc: Any, value: str) -> None:
    next(c for c in doc["commands"] if isinstance(c, dict) and "git" in c)["into"] = value


def _set_title(doc: Any, value: str) -> None:
    doc["title"] = value


def _set_why(doc: Any, value: str) -> None:
    doc["why"] = value


def _set_workdir(doc: Any, value: str) -> None:
    doc["path"] = value


def _set_copy_dest(doc: Any, value: str) -> None:
    doc["dest"] = value


STAGE_EDITS: dict[str, tuple[str, Callable[[Any, str], None], str]] = {
    "step env value": ("stages/04-mori.toml", _set_env, "OFF"),
    "env_after value": ("stages/10-nixl.toml", lambda d, v: d["env_after"].__setitem__("VLLM_CACHE_ROOT", v), "/x"),
    "pip env value": ("stages/07-vllm.toml", _set_pip_env, "${NVCC_THREADS}"),
    "git into path": ("stages/04-mori.toml", _set_into, "/tmp/mori"),
    "fetch into path": (
        "stages/05-aiter.toml",
        lambda d, v: next(c for c in d["commands"] if isinstance(c, dict) and "fetch" in c).__setitem__("into", v),
        "/tmp/aiter",
    ),
    "locked pip install": (
        "stages/15-flydsl-repin.toml",
        lambda d, v: next(c for c in d["commands"] if isinstance(c, dict) and c.get("locked")).__setitem__("pip", v),
        "install --force-reinstall",
    ),
    "fetched pip install": (
        "stages/05-aiter.toml",
        lambda d, v: next(c for c in d["commands"] if isinstance(c, dict) and "fetched" in c).__setitem__("pip", v),
        "install",
    ),
    "fetched pin": (
        "stages/05-aiter.toml",
        lambda d, v: next(c for c in d["commands"] if isinstance(c, dict) and "fetched" in c).__setitem__("fetched", v),
        "aiter",
    ),
    "title": ("stages/06-aiter-jit.toml", _set_title, "Drop stale AITER JIT caches"),
    "why": ("stages/06-aiter-jit.toml", _set_why, "JIT objects in the base"),
    "WORKDIR path": ("stages/02-workdir.toml", _set_workdir, "/app"),
    "COPY dest": ("stages/18-launcher.toml", _set_copy_dest, "/opt/imagebuild/launcher/"),
}  # fmt: skip


@pytest.mark.parametrize("edit", STAGE_EDITS)
@PROPERTY
@given(data=st.data())
def test_any_stage_value(world: World, benign: Any, edit: str, data: st.DataObject) -> None:
    relative, change, original = STAGE_EDITS[edit]
    value = data.draw(values(original))

    def render_it() -> str:
        world.reset()
        world.edit(relative, lambda doc: change(doc, value))
        return world.render()

    assert_refused_or_same_structure(render_it, benign)


ACCEPTED_TRICKY = {
    # Accepted by their kind, and dangerous unless quoted where they land.
    ("pins.toml", "mori", "url"): "https://example.org/$(touch$IFS/x);y&z'q'(f)*g!h/mori.git",
    ("pins.toml", "aiter", "url"): "https://example.org/a$b'c/amd_aiter-0.1.19-py3-none-any.whl",
}


@pytest.mark.parametrize("where", ACCEPTED_TRICKY, ids=lambda w: ".".join(w[1:]))
def test_values_with_shell_syntax_that_are_accepted_render_as_one_literal(
    world: World, benign: Any, where: tuple[str, str, str]
) -> None:
    relative, pin, key = where
    value = ACCEPTED_TRICKY[where]
    world.reset()
    world.edit(relative, lambda doc: doc[pin].__setitem__(key, value))
    assert assert_refused_or_same_structure(world.render, benign)  # accepted, and rendered safely
    text = world.render()
    assert "$(touch" not in text.replace("\\$(touch", "")  # every $ of a literal is escaped
    assert "$b" not in text.replace("\\$b", "")


def test_the_issue_s_injections_are_refused(world: World) -> None:
    """The three found by hand: a PyPI project name, a newline in a pin, an unquoted `into`."""
    cases = [
        ("pins.toml", lambda d: d["flydsl"].__setitem__("project", 'flydsl"; touch /pwned; echo "')),
        ("pins.toml", lambda d: d["rust"].__setitem__("version", "1.88.0\nRUN touch /pwned")),
        ("stages/04-mori.toml", lambda d: _set_into(d, "/tmp/mori; touch /pwned")),
        ("stages/04-mori.toml", lambda d: _set_env(d, 'OFF"\nRUN touch /pwned\nENV X="')),
    ]
    for relative, change in cases:
        world.reset()
        world.edit(relative, change)
        with pytest.raises(ConfigError):
            world.render()
    world.reset()
    with pytest.raises(ConfigError, match="--build-arg: 'MAX_JOBS'"):
        check_build_args({"MAX_JOBS": "32\nRUN touch /pwned"}, world.inputs())


# A PyPI pin downloaded by a { pypi = PIN, into = DIR } command: no stage has one today (flydsl
# comes from the lock), so the world gets one for these cases, benign and edited alike.
def _with_pypi_download(doc: Any, into: str = "/tmp/flydsl") -> None:
    at = next(i for i, c in enumerate(doc["commands"]) if isinstance(c, dict) and c.get("locked"))
    doc["commands"].insert(at, {"pypi": "flydsl", "into": into})


_pypi_benign: dict[str, Benign] = {}


def pypi_benign(world: World) -> Benign:
    if not _pypi_benign:
        world.reset()
        world.edit("stages/15-flydsl-repin.toml", _with_pypi_download)
        text = world.render()
        runs = run_lines(text)
        _pypi_benign["x"] = Benign(instructions(text), arg_names(text), runs, [shell_shape(r) for r in runs])
    return _pypi_benign["x"]


@pytest.mark.parametrize("key", ["into", "project"])
@PROPERTY
@given(data=st.data())
def test_any_pypi_download_value(world: World, key: str, data: st.DataObject) -> None:
    benign = pypi_benign(world)
    value = data.draw(values("/tmp/flydsl" if key == "into" else "flydsl"))

    def render_it() -> str:
        world.reset()
        if key == "into":
            world.edit("stages/15-flydsl-repin.toml", lambda d: _with_pypi_download(d, value))
        else:
            world.edit("stages/15-flydsl-repin.toml", _with_pypi_download)
            world.edit("pins.toml", lambda d: d["flydsl"].__setitem__("project", value))
        return world.render()

    assert_refused_or_same_structure(render_it, benign)


# pylock.toml: what each step installs (hash-locked lines in its RUN), the build constraint's exact
# versions (a context file) and the guard's setuptools. A field reaches the Dockerfile, that file, or
# only the SBOM and provenance; every one is checked by kind when the lock is read.
LOCKED_PACKAGES = ["tqdm", "flydsl", "setuptools", "wheel"]
LOCK_FIELDS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "name": (lambda p: p, "name"),
    "version": (lambda p: p, "version"),
    "marker": (lambda p: p, "marker"),
    "wheel name": (lambda p: p["wheels"][0], "name"),
    "wheel url": (lambda p: p["wheels"][0], "url"),
    "sha256": (lambda p: p["wheels"][0]["hashes"], "sha256"),
}


def build_constraint_lines(context: BuildContext) -> list[str]:
    data = next(f.data for f in context.files if f.path == f"{CONTEXT_ROOTFS}{BUILD_CONSTRAINT_FILE}")
    return [line for line in data.decode().splitlines() if line and not line.startswith("#")]


@pytest.mark.parametrize("package", LOCKED_PACKAGES)
@pytest.mark.parametrize("field", LOCK_FIELDS)
@PROPERTY
@given(data=st.data())
def test_any_python_lock_field(
    world: World, benign: Any, package: str, field: str, data: st.DataObject
) -> None:
    table_of, key = LOCK_FIELDS[field]
    pristine = tomllib.loads((REPO / "pylock.toml").read_text())
    entry = next(p for p in pristine["packages"] if p["name"] == package)
    value = data.draw(values(table_of(entry)[key]))
    world.reset()
    benign_constraint = build_constraint_lines(world.context())

    def edit(doc: Any) -> None:
        entry = next(p for p in doc["packages"] if p["name"] == package)
        table_of(entry)[key] = value

    def render_it() -> str:
        world.reset()
        world.edit("pylock.toml", edit)
        return world.render()

    if assert_refused_or_same_structure(render_it, benign):
        # The build constraint file keeps one `name==version` line per locked build dependency.
        lines = build_constraint_lines(world.context())
        assert len(lines) == len(benign_constraint), lines
        assert all(
            re.fullmatch(r"[A-Za-z0-9._-]+(==|<|>|<=|>=|!=)[A-Za-z0-9.+!*-]+", line) for line in lines
        ), lines


LABEL_ARGS = ["IMAGEBUILD_SOURCE", "IMAGEBUILD_REVISION", "IMAGEBUILD_CREATED", "IMAGEBUILD_VERSION"]


@PROPERTY
@given(key=values("io.imagebuild.sbom"), value=values("gfx942.sbom.cdx.json"))
def test_any_label_in_the_label_block(key: str, value: str) -> None:
    """The closing block: four ARGs and one LABEL, whatever a fixed label's key or value holds."""
    fixed = {"io.imagebuild.arch": "gfx942", key: value}
    try:
        block = label_block(fixed)
    except ConfigError:
        return
    text = "FROM base\n" + block
    assert instructions(text) == ["FROM", "LABEL"], text
    assert arg_names(text) == set(LABEL_ARGS), text
    # One label per key (dockerfile-parse keeps a key's escapes, so count them rather than compare).
    parser = DockerfileParser(fileobj=io.BytesIO(text.encode()))
    assert len(parser.labels) == len(fixed) + len(LABEL_ARGS), parser.labels
