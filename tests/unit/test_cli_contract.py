"""What every verb promises, checked for each registered verb (a verb added later is covered too).

--help exits 0 with examples and the verb's exit codes; an unknown flag is one line and exit 2;
every verb has --json: success and failure are one JSON document, schema_version first, with the
keys docs/commands.md's "Command-line grammar" documents for the verb, and nothing else on stdout; the
global flags and the common options work before and after the verb; -o and -t are the same flag as
--output and --tag wherever a verb has them.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from imagebuild.build.core import BuildRecord
from imagebuild.cli import main
from imagebuild.cli.app import build_parser, parse_arguments, registered_verbs
from imagebuild.cli.build import build_document
from imagebuild.cli.image import verify_document
from imagebuild.cli.output import write_json
from imagebuild.cli.verbs import Parser, UsageError, Verb
from imagebuild.distribute.compression import Compression
from imagebuild.distribute.export import ExportOptions, export_image
from imagebuild.engine.docker import DockerEngine
from imagebuild.engine.http_api import HttpEngine
from imagebuild.errors import EXIT_MEANINGS, ExitCode
from imagebuild.testing import FakeEngine
from imagebuild.verify import CheckResult, VerifyResult
from tests import REPO
from tests.unit import imagetars

VERBS = registered_verbs()
CHECKOUT_VERBS = [v for v in VERBS if v.checkout]
OTHER_VERBS = [v for v in VERBS if not v.checkout]
TAG = "imagebuild/kimi-k3:gfx942"
DIGEST_REF = "127.0.0.1:5000/imagebuild/kimi-k3@sha256:" + "ab" * 32


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


def documented_keys() -> dict[str, tuple[set[str], set[str]]]:
    """docs/commands.md's table of each verb's --json keys: (keys every document has, every key it names).

    A key in parentheses is in some runs only, or a key of each row.
    """
    commands = (REPO / "docs" / "commands.md").read_text(encoding="utf-8")
    table = commands.split("| verb | keys |\n|---|---|\n", 1)[1].split("\n\n", 1)[0]
    keys: dict[str, tuple[set[str], set[str]]] = {}
    for row in table.splitlines():
        match = re.fullmatch(r"\| (.+?) \| (.+) \|", row)
        assert match, row
        verb, text = match.groups()
        always = set(re.findall(r"`([a-z0-9_]+)`", re.sub(r"\([^()]*\)", "", text)))
        keys[verb] = (always, set(re.findall(r"`([a-z0-9_]+)`", text)))
    return keys


DOCUMENTED = documented_keys()


def check_document(out: str, verb: str) -> dict[str, object]:
    """stdout is one JSON document, schema_version first, with the keys docs/commands.md gives the verb."""
    document: dict[str, object] = json.loads(out)
    assert next(iter(document)) == "schema_version"
    assert document["schema_version"] == 1
    always, named = DOCUMENTED[verb]
    keys = set(document) - {"schema_version"}
    assert always <= keys, f"{verb}: documented but missing: {always - keys}"
    assert keys <= named, f"{verb}: not in docs/commands.md's table: {keys - named}"
    return document


@pytest.fixture
def no_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory (no checkout) and DOCKER_HOST at a socket that does not exist."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    return tmp_path


def test_every_verb_is_registered() -> None:
    assert set(ids(VERBS)) == {
        "init", "render", "plan", "lock", "build", "verify", "publish", "export", "import", "diff", "slurm",
        "attestations",
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


def test_every_verb_has_json_and_its_keys_in_the_readme() -> None:
    assert [v.name for v in VERBS if v.json is None] == []
    assert set(DOCUMENTED) == {*ids(VERBS), "any, on failure"}
    assert DOCUMENTED["any, on failure"] == ({"error", "exit_code"}, {"error", "exit_code"})


@pytest.mark.parametrize("verb", VERBS, ids=ids(VERBS))
def test_json_failure_is_a_json_document_and_nothing_else(
    verb: Verb, no_engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The verb runs and fails (no project here, no engine, '?' for each required value; init: a file here)."""
    if verb.name == "init":
        (no_engine / "notes.txt").write_text("not empty\n")
    code = main(["-C", str(no_engine), verb.name, *required_arguments(verb, "?"), "--json"])
    out, err = capsys.readouterr()
    assert code in (ExitCode.BAD_INPUT, ExitCode.NO_ENGINE)
    document = check_document(out, "any, on failure")  # stdout is the document and nothing else
    assert document == {"schema_version": 1, "error": document["error"], "exit_code": code}
    assert err == f"imagebuild: error: {document['error']}\n"
    assert "Traceback" not in err


@pytest.mark.parametrize("verb", VERBS, ids=ids(VERBS))
@pytest.mark.parametrize("before", [True, False], ids=["json-before-verb", "json-after-verb"])
def test_json_usage_error_is_a_json_document_too(
    verb: Verb, before: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--json", verb.name, "--no-such-flag"] if before else [verb.name, "--json", "--no-such-flag"]
    assert main(argv) == 2
    assert check_document(capsys.readouterr().out, "any, on failure")["exit_code"] == 2


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


@pytest.mark.parametrize("verb", VERBS, ids=ids(VERBS))
def test_common_options_before_and_after_the_verb(
    verb: Verb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    required = required_arguments(verb)
    assert parse_arguments(["--json", verb.name, *required]).json is True
    assert parse_arguments([verb.name, *required, "--json"]).json is True
    assert parse_arguments([verb.name, *required]).json is False
    if not verb.checkout:
        args = parse_arguments([verb.name, *required])
        assert not hasattr(args, "arch")
        assert not hasattr(args, "pins")
        for flag in ("--arch", "--pins"):
            with pytest.raises(UsageError, match=f"{flag} does not apply to `{verb.name}`"):
                parse_arguments([flag, "x", verb.name, *required])
        return
    before = parse_arguments(["--arch", "gfx950", "--pins", "a.toml", verb.name, *required])
    assert (before.arch, before.pins) == ("gfx950", Path("a.toml"))
    after = parse_arguments([verb.name, *required, "--arch", "gfx950", "--pins", "a.toml"])
    assert (after.arch, after.pins) == ("gfx950", Path("a.toml"))
    # Given on both sides, the later (after the verb) wins, also when it is the default value.
    both = parse_arguments(["--arch", "gfx950", "--pins", "a.toml", verb.name, *required, "--arch", "gfx942"])
    assert (both.arch, both.pins) == ("gfx942", Path("a.toml"))
    defaults = parse_arguments([verb.name, *required])
    assert (defaults.arch, defaults.pins) == ("gfx942", None)


@pytest.mark.parametrize(("short", "long"), [("-o", "--output"), ("-t", "--tag")])
def test_short_and_long_output_and_tag_are_one_flag_on_every_verb(short: str, long: str) -> None:
    having = []
    for verb in VERBS:
        actions = {s: a for a in verb_parser(verb)._actions for s in a.option_strings}
        assert (short in actions) == (long in actions), verb.name
        if long in actions:
            assert actions[short] is actions[long], verb.name
            having.append(verb.name)
    assert having == {"-o": ["render", "export", "slurm"], "-t": ["build", "publish"]}[short]


@pytest.fixture
def fake_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    """The engine every verb opens (DockerEngine.opened) is this fake; the working directory is empty."""
    monkeypatch.chdir(tmp_path)
    engine = FakeEngine()
    monkeypatch.setattr(DockerEngine, "from_env", classmethod(lambda cls, timeout=600: engine))
    monkeypatch.setattr(HttpEngine, "from_env", classmethod(lambda cls, timeout=600: engine))  # build's
    return engine


def _archive(where: Path, name: str) -> str:
    layers = [imagetars.layer([imagetars.Item("etc/os-release", data=b"base\n")])]
    path = where / name
    path.write_bytes(imagetars.saved(layers, imagetars.config(layers)))
    return str(path)


def _exported(where: Path) -> str:
    source = FakeEngine()
    source.add_saved_image(TAG, size=1 << 12)
    options = ExportOptions(image=TAG, output=where, compression=Compression.GZIP)
    return str(export_image(options, source, report=lambda _: None).manifest_path)


def _successful_runs(tmp: Path, engine: FakeEngine) -> dict[str, list[str]]:
    """A command line of each verb that succeeds in the unit tier (a fake engine, no network)."""
    engine.add_saved_image(TAG, size=1 << 12, labels={"io.imagebuild.arch": "gfx942"})
    return {
        "init": ["init", str(tmp / "project")],
        "render": ["-C", str(REPO), "render", "--allow-unpinned", "-o", str(tmp / "context")],
        "plan": ["-C", str(REPO), "plan", "--explain"],
        "publish": ["publish", TAG, "-t", "127.0.0.1:5000/ml/kimi-k3:v1"],
        "export": ["export", TAG, "-o", str(tmp / "out"), "--compress", "gzip"],
        "import": ["import", _exported(tmp / "elsewhere")],
        "diff": ["diff", _archive(tmp, "a.tar"), _archive(tmp, "b.tar")],
        "slurm": [
            "slurm",
            "--nodes",
            "2",
            "--variant",
            "pp2xtp8",
            "--model-path",
            "/m",
            "--image",
            DIGEST_REF,
        ],
    }


# lock needs its sources (tests/lock), build a recorded stream and verify a container: build's and
# verify's documents are checked as made from a replayed build and a result below.
SUCCEEDING = ["init", "render", "plan", "publish", "export", "import", "diff", "slurm"]


@pytest.mark.parametrize("name", SUCCEEDING)
@pytest.mark.parametrize("before", [True, False], ids=["json-before-verb", "json-after-verb"])
def test_json_success_is_one_document_with_the_documented_keys(
    name: str, before: bool, fake_engine: FakeEngine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _successful_runs(tmp_path, fake_engine)[name]
    code = main(["--json", *argv] if before else [*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    check_document(out, name)


def test_build_and_verify_documents_have_the_documented_keys(
    replay: Callable[..., tuple[FakeEngine, BuildRecord]], capsys: pytest.CaptureFixture[str]
) -> None:
    """The two verbs the unit tier cannot run to success: their documents, made as the verbs make them."""
    _, record = replay("success")
    write_json(build_document(record))
    check_document(capsys.readouterr().out, "build")
    check = CheckResult(name="test_version", group="versions", outcome="failed", message="expected 1")
    result = VerifyResult(
        image=TAG, image_id="sha256:" + "0" * 64, arch="gfx942", checks=(check,), duration_s=1
    )
    write_json(verify_document(result))
    check_document(capsys.readouterr().out, "verify")


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
    assert "not an imagebuild project (no stages/image.toml in it)" in capsys.readouterr().err


def _run_for_a_reader_that_left(*argv: str) -> tuple[int, str]:
    """imagebuild whose stdout's reader is gone before the first byte: every write fails with EPIPE."""
    with subprocess.Popen(
        [sys.executable, "-m", "imagebuild", "-C", str(REPO), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdout.close()
        err = proc.stderr.read().decode()
        return proc.wait(timeout=60), err


def test_a_closed_stdout_is_not_a_traceback() -> None:
    code, err = _run_for_a_reader_that_left("render", "--allow-unpinned", "--output", "-")
    assert code == ExitCode.PIPE_CLOSED
    assert err == ""


def _run_closing(descriptor: int, *argv: str) -> tuple[int, str, str]:
    """imagebuild in a child started with ``descriptor`` closed, as the shell's ``N>&-`` does."""
    proc = subprocess.run(
        ["sh", "-c", f'exec "$@" {descriptor}>&-', "sh", sys.executable, "-m", "imagebuild", *argv],
        capture_output=True,
        check=False,
        timeout=60,
    )
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def test_a_stdout_closed_from_the_start_is_refused_before_the_verb_runs(tmp_path: Path) -> None:
    """`imagebuild init DIR >&-`: one line, exit 2, and DIR never made; before, init wrote its 25
    files and then failed with a traceback writing where they were."""
    code, _, err = _run_closing(1, "init", str(tmp_path / "project"))
    assert code == ExitCode.BAD_INPUT
    assert err == "imagebuild: error: stdout is closed: imagebuild writes its result there; redirect it to /dev/null to discard it\n"
    assert not (tmp_path / "project").exists()


def test_a_closed_stderr_keeps_the_json_error_document_alone_on_stdout() -> None:
    code, out, _ = _run_closing(2, "-C", str(REPO), "--json", "plan", "--arch", "nope")
    assert code == ExitCode.BAD_INPUT
    document = json.loads(out)
    assert document["exit_code"] == ExitCode.BAD_INPUT
    assert "unknown arch 'nope'" in document["error"]


def test_a_json_error_document_for_a_reader_that_left_is_not_a_traceback() -> None:
    code, err = _run_for_a_reader_that_left("--json", "plan", "--arch", "nope")
    assert code == ExitCode.BAD_INPUT  # the error's own code: the reader leaving does not change it
    assert err.splitlines() == [err.strip()]
    assert "unknown arch 'nope'" in err
