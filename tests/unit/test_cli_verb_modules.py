"""A command line is parsed with its verb's module alone, and means what it means with every verb.

`imagebuild build` imports neither the slurm job's model nor the other verbs' modules (a no-op build's
start-up, benchmarks/bench_noop.py); a command line the reduced parser refuses, and any help, is
parsed again with every verb, so errors and help are those of the full command line.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from imagebuild.cli.app import (
    MODULE_OF_VERB,
    VERB_MODULES,
    _parse,
    build_parser,
    named_verb,
    parse_arguments,
)
from imagebuild.cli.verbs import UsageError
from tests import REPO


@pytest.mark.parametrize(
    ("arguments", "verb"),
    [
        (["build", "--tag", "slurm"], "build"),
        (["-C", "render", "build"], "build"),  # render is -C's value, not the verb
        (["--arch", "gfx950", "-v", "import", "x.json"], "import"),
        (["--arch=gfx950", "plan"], "plan"),
        (["-vv", "--json", "slurm", "--nodes", "2"], "slurm"),
        (["--help", "build"], None),  # the top-level help lists every verb
        (["--version"], None),
        (["nonsense"], None),
        ([], None),
    ],
)
def test_named_verb(arguments: list[str], verb: str | None) -> None:
    assert named_verb(arguments) == verb


def test_every_verb_has_its_module() -> None:
    registered = {v.name for v in build_parser()[1]}
    assert registered == set(MODULE_OF_VERB)
    for module, names in VERB_MODULES:
        assert {v.name for v in build_parser(only=names[0])[1]} == set(names), module


@pytest.mark.parametrize(
    "arguments",
    [
        ["build", "--tag", "a/b:c", "--no-cache", "--arch", "gfx950", "-q"],
        ["-v", "--arch", "gfx950", "render", "--check"],
        ["export", "a/b:c", "-o", "/tmp/x", "--compress", "none", "--json"],
        ["-C", ".", "lock", "--check"],
    ],
)
def test_reduced_parse_is_the_full_parse(arguments: list[str]) -> None:
    assert named_verb(arguments) is not None
    assert vars(parse_arguments(arguments)) == vars(_parse(build_parser(), arguments))


def test_a_refused_command_line_is_refused_as_with_every_verb() -> None:
    # --pins before `slurm`, which has no --pins: the message names the verbs it does apply to.
    with pytest.raises(UsageError) as caught:
        parse_arguments(
            [
                "--pins",
                "p.toml",
                "slurm",
                "--nodes",
                "2",
                "--variant",
                "v",
                "--model-path",
                "/m",
                "--image",
                "r/i@sha256:" + "a" * 64,
            ]
        )
    assert "build" in str(caught.value)
    assert "lock" in str(caught.value)


def test_build_imports_no_other_verb() -> None:
    probe = (
        "import sys, json; from imagebuild.cli.app import parse_arguments; "
        "parse_arguments(['build', '--tag', 'a/b:c']); "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('imagebuild'))))"
    )
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", probe], cwd=REPO, check=True, capture_output=True, text=True
        ).stdout
    )
    others = (
        "imagebuild.cli.slurm",
        "imagebuild.slurm.job",
        "imagebuild.cli.distribute",
        "imagebuild.cli.scaffold",
    )
    for module in others:
        assert module not in loaded
    assert "imagebuild.cli.build" in loaded
