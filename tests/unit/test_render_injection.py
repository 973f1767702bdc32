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
import tomllib
from collections.abc import Callable
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser
from hypothesis import given
from hypothesis import strategies as st

from imagebuild.build.core import check_build_args
from imagebuild.errors import ConfigError
from imagebuild.inputs.layout import BUILD_CONSTRAINT_FILE, CONTEXT_ROOTFS
from imagebuild.render.context import BuildContext
from imagebuild.render.labels import label_block
from tests import REPO
from tests.unit.render_injection_support import (
    PROPERTY,
    Benign,
    World,
    arg_names,
    assert_refused_or_same_structure,
    benign_render,
    instructions,
    run_lines,
    shell_shape,
    values,
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("world"))


@pytest.fixture(scope="module")
def benign(world: World) -> Benign:
    world.reset()
    return benign_render(world)


@pytest.fixture(scope="module")
def benign_nixl(world: World) -> Benign:
    """The render with step 10's optional layer on (WITH_NIXL other than "0" selects its commands)."""
    world.reset()
    world.edit("stages/image.toml", lambda doc: doc["args"].__setitem__("WITH_NIXL", "1"))
    return benign_render(world)


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
