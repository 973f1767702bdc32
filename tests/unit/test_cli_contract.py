"""What every verb promises, checked for each registered verb (a verb added later is covered too).

--help exits 0 with examples and the verb's exit codes; an unknown flag is one line and exit 2;
with --json a failure prints a JSON document with error and exit_code and nothing else on stdout;
the global flags work before and after the verb.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.cli.app import build_parser, parse_arguments, registered_verbs
from imagebuild.cli.verbs import Parser, UsageError, Verb
from imagebuild.errors import EXIT_MEANINGS, ExitCode
from tests import REPO

VERBS = registered_verbs()
JSON_VERBS = [v for v in VERBS if v.json is not None]


def ids(verbs: list[Verb]) -> list[str]:
    return [v.name for v in verbs]


def verb_parser(verb: Verb) -> Parser:
    return build_parser()[1].parser(verb.name)


def required_arguments(verb: Verb, value: str = "x") -> list[str]:
    """The verb's required arguments, each with a value that parses (ints get 2)."""
    parser = verb_parser(verb)
    chosen: list[argparse.Action] = [a for a in parser._actions if a.required]
    for group in parser._mutually_exclusive_groups:
        if group.required:
            chosen.append(group._group_actions[0])
    argv: list[str] = []
    for action in chosen:
        filler = "2" if action.type is int else value
        argv += [action.option_strings[0], filler] if action.option_strings else [filler]
    return argv


@pytest.fixture
def no_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory (no checkout) and DOCKER_HOST at a socket that does not exist."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    return tmp_path


def test_every_verb_is_registered() -> None:
    assert set(ids(VERBS)) == {
        "render", "plan", "lock", "build", "verify", "publish", "export", "import", "diff", "slurm",
    }  # fmt: skip


@pytest.mark.parametrize("verb", VERBS, ids=ids(VERBS))
def test_help_exits_0_and_shows_examples_and_exit_codes(
    verb: Verb, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([verb.name, "--help"]) == 0
    out = capsys.readouterr().out
    examples = out.split("examples:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert examples
    assert all(line.startswith("  imagebuild ") and f" {verb.name}" in line for line in examples)
    table = out.split("exit codes:\n", 1)[1]
    for code in (*verb.exit_codes, ExitCode.OK, ExitCode.BAD_INPUT, ExitCode.INTERRUPTED):
        assert re.search(rf"^  {int(code):<4} {re.escape(code.meaning)}$", table, re.MULTILINE), code
    for flag in ("--verbose", "--quiet", "--traceback", "--project"):
        assert flag in out


@pytest.mark.parametrize("verb", VERBS, ids=ids(VERBS))
def test_unknown_flag_is_one_line_and_exit_2(verb: Verb, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([verb.name, *required_arguments(verb), "--no-such-flag"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"imagebuild: error: unrecognized arguments: --no-such-flag; see `imagebuild {verb.name} --help`\n"
    )


@pytest.mark.parametrize("verb", JSON_VERBS, ids=ids(JSON_VERBS))
def test_json_failure_is_a_json_document_and_nothing_else(
    verb: Verb, no_engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The verb runs and fails (no checkout here, no engine, '?' for each required value)."""
    code = main(["-C", str(no_engine), verb.name, *required_arguments(verb, "?"), "--json"])
    out, err = capsys.readouterr()
    assert code in (ExitCode.BAD_INPUT, ExitCode.NO_ENGINE)
    document = json.loads(out)  # stdout is the document and nothing else
    assert document == {"schema_version": 1, "error": document["error"], "exit_code": code}
    assert err == f"imagebuild: error: {document['error']}\n"
    assert "Traceback" not in err


@pytest.mark.parametrize("verb", JSON_VERBS, ids=ids(JSON_VERBS))
def test_json_usage_error_is_a_json_document_too(verb: Verb, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([verb.name, "--json", "--no-such-flag"]) == 2
    assert json.loads(capsys.readouterr().out)["exit_code"] == 2


@pytest.mark.parametrize("verb", VERBS, ids=ids(VERBS))
def test_global_flags_before_and_after_the_verb(
    verb: Verb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    flags = ["-v", "-q", "--traceback", "-C", str(tmp_path)]
    required = required_arguments(verb)
    for argv in ([*flags, verb.name, *required], [verb.name, *required, *flags]):
        args = parse_arguments(argv)
        assert (args.verbose, args.quiet, args.traceback, args.project) == (1, True, True, tmp_path)
    assert parse_arguments(["-v", verb.name, *required, "--verbose"]).verbose == 2
    defaults = parse_arguments([verb.name, *required])
    assert (defaults.verbose, defaults.quiet, defaults.traceback, defaults.project) == (0, False, False, None)


@pytest.mark.parametrize("verb", VERBS, ids=ids(VERBS))
def test_progress_before_or_after_the_verb_where_it_applies(
    verb: Verb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    required = required_arguments(verb)
    if verb.progress:
        assert parse_arguments(["--progress", "plain", verb.name, *required]).progress == "plain"
        assert parse_arguments([verb.name, *required, "--progress", "tty"]).progress == "tty"
    else:
        with pytest.raises(UsageError, match=f"--progress does not apply to `{verb.name}`"):
            parse_arguments(["--progress", "plain", verb.name, *required])


def test_every_exit_code_has_a_meaning_and_the_readme_shows_the_table() -> None:
    assert set(EXIT_MEANINGS) == set(ExitCode)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    rows = [f"| {int(code)} | {code.meaning} |" for code in ExitCode]
    assert "\n".join(["| code | meaning |", "|---|---|", *rows]) in readme


def test_global_flags_reach_the_verb(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # not a checkout: -C names it
    assert main(["plan", "-C", str(REPO), "--changed", "router", "-q"]) == 0
    out, err = capsys.readouterr()
    assert err == ""  # -q after the verb silenced "A change of 'router' rebuilds ..."
    assert out.splitlines()[0].split() == ["step", "instruction", "title", "pins"]
    assert main(["-C", str(tmp_path), "plan"]) == 2
    assert "not an imagebuild checkout (no stages/image.toml in it)" in capsys.readouterr().err


def test_a_closed_stdout_is_not_a_traceback() -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "imagebuild", "-C", str(REPO), "render", "--allow-unpinned", "--output", "-"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdout.close()  # the reader is gone before the first byte: every write fails with EPIPE
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=60)
    assert code == ExitCode.PIPE_CLOSED
    assert err == ""
