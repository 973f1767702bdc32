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


def test_a_no_op_builds_modules_leave_out_what_only_a_new_image_needs() -> None:
    """What `cmd_build` imports before it asks the engine: not the Docker SDK, the rewrite, the tar
    machinery under it, the cache image's writer, the containerd store's reader or the SBOM's makers,
    each imported where a build that makes a new image (or that engine) needs it (bench_noop.py)."""
    probe = (
        "import sys, json; import imagebuild.cli.build, imagebuild.build.core, imagebuild.build.progress, "
        "imagebuild.engine.http_api; print(json.dumps(sorted(sys.modules)))"
    )
    run = subprocess.run([sys.executable, "-c", probe], cwd=REPO, check=True, capture_output=True, text=True)
    loaded = set(json.loads(run.stdout))
    assert "imagebuild.normalize.after_build" in loaded  # the reuse of the last normalisation is on the path
    left_out = {
        "docker",
        "requests",
        "cyclonedx",
        "imagebuild.normalize.core",
        "imagebuild.normalize.rewrite",
        "imagebuild.normalize.lower",
        "imagebuild.normalize.cache_image",
        "imagebuild.engine.containerd_store",
        "imagebuild.importer.manifest",
        "imagebuild.build.sbom",
        "imagebuild.build.provenance",
    }
    assert sorted(left_out & loaded) == []
