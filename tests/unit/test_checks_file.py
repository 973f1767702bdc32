"""A project's own checks: checks.toml read into typed tests, every malformed file refused with file, line and
key before an engine is asked; -k and --list work on built-in and own checks alike, without an image."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.errors import ConfigError, ExitCode
from imagebuild.project import find_project
from imagebuild.verify import VerifyOptions, prepare_verify
from imagebuild.verify.checks_file import ChecksFile, CommandTest, KeyValue, load_checks
from imagebuild.verify.selection import keyword_expression, layer_check_selected
from tests import REPO

PINS = REPO / "tests" / "data" / "build_streams" / "pins.toml"

GOOD = """\
# what the team checks in its image
schema_version = 1

[[command_tests]]
name = "vllm imports"
command = ["python3", "-c", "import vllm"]
env = { HIP_VISIBLE_DEVICES = "" }
expected_output = ["^$"]
excluded_error = ["Traceback"]

[[command_tests]]
name = "shell form"
command = "test -d /app && echo ok"
exit_code = 0
expected_output = ["^ok$"]

[[file_existence_tests]]
name = "launcher executable"
path = "/opt/kimi/launch"
permissions = "-rwxr-xr-x"
uid = 0

[[file_existence_tests]]
name = "no ssh keys"
path = "/root/.ssh"
should_exist = false

[[file_content_tests]]
name = "pip constraint"
path = "/etc/pip-constraints.txt"
expected_contents = ["^setuptools=="]
excluded_contents = ["git\\\\+"]

[metadata_test]
workdir = "/app"
entrypoint = []
env = [{ key = "VLLM_USE_V1", value = "1" }]
labels = [{ key = "org.opencontainers.image.revision", value = "^[0-9a-f]{40}$", is_regex = true }]
exposed_ports = ["8000/tcp"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "checks.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_full_file_is_read_into_typed_tests(tmp_path: Path) -> None:
    checks = load_checks(write(tmp_path, GOOD))
    first, second = checks.command_tests
    assert first == CommandTest(
        name="vllm imports", line=4, command=("python3", "-c", "import vllm"), env={"HIP_VISIBLE_DEVICES": ""},
        expected_output=("^$",), excluded_error=("Traceback",),
    )  # fmt: skip
    assert second.command == "test -d /app && echo ok"
    assert second.line == 11
    assert [t.name for t in checks.file_existence_tests] == ["launcher executable", "no ssh keys"]
    assert checks.file_existence_tests[0].permissions == "-rwxr-xr-x"
    assert checks.file_existence_tests[1].should_exist is False
    assert checks.file_content_tests[0].excluded_contents == ("git\\+",)
    meta = checks.metadata_test
    assert meta is not None
    assert meta.line == 34
    assert meta.entrypoint == ()
    assert meta.cmd is None  # not given: not checked
    assert meta.labels == (KeyValue(key="org.opencontainers.image.revision", value="^[0-9a-f]{40}$", is_regex=True),)
    assert checks.count == 5


def test_the_checks_survive_the_trip_to_the_check_modules(tmp_path: Path) -> None:
    checks = load_checks(write(tmp_path, GOOD))
    assert ChecksFile.from_json(json.loads(json.dumps(checks.to_json()))) == checks


def test_an_argv_command_is_quoted_word_by_word_and_a_string_goes_to_sh_c() -> None:
    argv = CommandTest(name="a", line=1, command=("printf", "%s\n", "a b; rm -rf /"), env={"X_Y": "1 2"})
    assert argv.shell_line() == "env 'X_Y=1 2' printf '%s\n' 'a b; rm -rf /'"
    script = CommandTest(name="b", line=1, command="echo $HOME | wc -c")
    assert script.shell_line() == "sh -c 'echo $HOME | wc -c'"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[command_tests]]\nname = "a"\ncommand = ["true"]\nexit_cod = 1\n',
         r"checks.toml:4: command_tests\[0\].exit_cod is not a key of command_tests; known: command, env, "),
        ('[[command_tests]]\nname = "a"\ncommand = ["true"]\n\n[[command_tests]]\nname = "b"\ncommand = ["x"]\nexit_code = "1"\n',
         r"checks.toml:8: command_tests\[1\].exit_code = '1' must be an integer"),
        ('[[command_tests]]\nname = "a"\ncommand = ["true"]\nexpected_output = ["(unclosed"]\n',
         r"checks.toml:4: command_tests\[0\].expected_output holds '\(unclosed', which is not a regular expression"),
        ('[[command_tests]]\nname = "a"\n', r"checks.toml:1: command_tests\[0\] has no command"),
        ('[[file_existence_tests]]\npath = "/x"\n', r"checks.toml:1: file_existence_tests\[0\] has no name"),
        ('[[file_existence_tests]]\nname = "x"\n', r"checks.toml:1: file_existence_tests\[0\] has no path"),
        ('[[file_existence_tests]]\nname = "x"\npath = "etc/passwd"\n',
         r"checks.toml:3: file_existence_tests\[0\].path = 'etc/passwd' "),
        ('[[file_existence_tests]]\nname = "x"\npath = "/x"\npermissions = "rwx"\n',
         r"checks.toml:4: file_existence_tests\[0\].permissions = 'rwx' must read like ls -l"),
        ('[[file_content_tests]]\nname = "x"\npath = "/x"\n',
         r"checks.toml:1: file_content_tests\[0\] has neither expected_contents nor excluded_contents"),
        ('[[command_tests]]\nname = "a"\ncommand = ["true"]\n[[file_existence_tests]]\nname = "a"\npath = "/x"\n',
         r"checks.toml:5: file_existence_tests\[0\].name = 'a' is already the name of the check at line 1"),
        ('[[command_tests]]\nname = "a"\ncommand = ["true"]\nenv = { HF_TOKEN = "hf_abcdefghijklmnopqrstuvwxyzABCDEF" }\n',
         r"checks.toml:4: command_tests\[0\].env has HF_TOKEN, whose value contains a credential-like string"),
        ('[[command_tests]]\nname = "a"\ncommand = ["echo", "line\\nbreak"]\n',
         r"checks.toml:3: command_tests\[0\].command holds a string that contains a control character"),
        ("[metadata_test]\nworkdir = 1\n", r"checks.toml:2: metadata_test.workdir = 1 must be a string"),
        ('[metadata_test]\nvolumes = ["/x"]\n', r"checks.toml:2: metadata_test.volumes is not a key of metadata_test"),
        ('[metadata_test]\nexposed_ports = ["http"]\n',
         r"checks.toml:2: metadata_test.exposed_ports holds 'http', which is not a port"),
        ('[metadata_test]\nlabels = [{ name = "a" }]\n', r"checks.toml:2: metadata_test.labels holds .*each entry is"),
        ("schema_version = 2\n", r"checks.toml:1: checks file.schema_version = 2 is not supported"),
        ('commandTests = []\n', r"checks.toml:1: checks file.commandTests is not a key of checks file"),
        ('[[command_tests]\nname = "a"\n', r"checks.toml: not valid TOML: .*line 1"),
    ],
    ids=[
        "unknown key", "wrong type", "bad regex", "no command", "no name", "no path", "relative path",
        "bad permissions", "content test without patterns", "duplicate name", "secret in env", "control character",
        "metadata wrong type", "metadata unknown key", "bad port", "bad label entry", "schema version",
        "camelCase key", "toml syntax",
    ],
)  # fmt: skip
def test_a_malformed_file_is_one_line_naming_file_line_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as caught:
        load_checks(path)
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(str(path))
    assert "hf_abcdefghijklmnopqrstuvwxyz" not in str(caught.value)


def test_k_uses_pytests_grammar_and_the_layer_scan_answers_to_its_names() -> None:
    with pytest.raises(ConfigError, match=r"-k 'config and \(' is not a pytest keyword expression"):
        keyword_expression("config and (")
    assert layer_check_selected(None)
    assert layer_check_selected("secrets")
    assert layer_check_selected("layers and not labels")
    assert not layer_check_selected("custom")


def test_a_k_that_selects_nothing_is_bad_input_before_any_engine(tmp_path: Path) -> None:
    inputs = find_project(REPO, PINS).load("gfx942")
    options = VerifyOptions(image="img", checks_file=load_checks(write(tmp_path, GOOD)), keyword="nothing_matches_this")
    with pytest.raises(ConfigError, match="-k 'nothing_matches_this' selects no check; `imagebuild verify --list`"):
        prepare_verify(inputs, options)
    selected = prepare_verify(inputs, VerifyOptions(image="img", checks_file=options.checks_file, keyword="ssh or layers"))
    assert [c.name for c in selected.selected] == ["test_file[no ssh keys]", "test_no_secrets_in_layers"]


def test_list_shows_built_in_and_own_checks_without_an_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    checks = write(tmp_path, GOOD)
    assert main(["-C", str(REPO), "verify", "--pins", str(PINS), "--checks", str(checks), "--list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["checks"]
    by_name = {c["name"]: c for c in listed}
    assert by_name["test_command[vllm imports]"] == {"name": "test_command[vllm imports]", "kind": "command",
                                                     "source": f"{checks}:4"}  # fmt: skip
    assert by_name["test_metadata[label org.opencontainers.image.revision]"]["source"] == f"{checks}:34"
    assert by_name["test_entrypoint_empty"]["source"] == "imagebuild/verify/checks/test_config.py"
    assert listed[-1]["name"] == "test_no_secrets_in_layers"
    assert main(["-C", str(REPO), "verify", "--pins", str(PINS), "--checks", str(checks), "--list", "-k", "file"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split() == ["NAME", "KIND", "SOURCE"]
    assert {row.split()[0] for row in rows[1:]} >= {"test_file[launcher", "test_file_content[pip"}


def test_a_malformed_checks_file_exits_2_before_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    checks = write(tmp_path, '[[command_tests]]\nname = "a"\ncommand = 1\n')
    assert main(["-C", str(REPO), "verify", "img", "--pins", str(PINS), "--checks", str(checks)]) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"{checks}:3: command_tests[0].command = 1 must be a string (run by sh -c) or a list of strings (argv)"), err
    assert len(err.splitlines()) == 1
    assert main(["-C", str(REPO), "verify", "img", "--checks", str(tmp_path / "absent.toml")]) == ExitCode.BAD_INPUT


def test_with_no_own_checks_the_list_has_no_custom_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Empty parameter sets would each be a skipped 'custom' check in the report and the JUnit file.
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    assert not load_checks(write(tmp_path, GOOD)).empty
    empty = write(tmp_path, "schema_version = 1\n[metadata_test]\n")
    assert load_checks(empty).empty
    assert main(["-C", str(REPO), "verify", "--pins", str(PINS), "--checks", str(empty), "--list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["checks"]
    assert listed, "the built-in checks are listed"
    assert not [c for c in listed if c["source"].startswith(str(empty)) or "custom" in c["source"]]
