"""The project's own checks (checks.toml, see verify/checks_file.py), run as container-structure-test runs
them: commands through the container's shell, files through testinfra, metadata from the inspected config.

Every check is named by the file's `name`, so `verify -k` and the JUnit report use the team's words.
Output shown in a failure is passed through the one secret detector first.
"""

from __future__ import annotations

import re
import shlex
import stat
from typing import Any

import pytest

from imagebuild.secrets import redact
from imagebuild.verify.checks.support import expect, image_config, project_checks
from imagebuild.verify.checks_file import CommandTest, FileContentTest, FileExistenceTest, KeyValue

CHECKS = project_checks()
SHOWN_OUTPUT_CHARS = 2000


def _tail(text: str) -> str:
    text = redact(text.strip())
    return ("..." + text[-SHOWN_OUTPUT_CHARS:]) if len(text) > SHOWN_OUTPUT_CHARS else (text or "(empty)")


def _matches(patterns: tuple[str, ...], text: str) -> list[str]:
    return [p for p in patterns if re.search(p, text, re.MULTILINE)]


@pytest.mark.parametrize("test", CHECKS.command_tests, ids=[t.name for t in CHECKS.command_tests])
def test_command(host: Any, test: CommandTest) -> None:
    done = host.run(test.shell_line())
    shown = test.command if isinstance(test.command, str) else shlex.join(test.command)
    expect(done.rc == test.exit_code, f"{test.name}: exit code of `{shown}`", expected=test.exit_code,
           found=f"{done.rc}; stderr: {_tail(done.stderr)}")  # fmt: skip
    for stream, text, wanted, unwanted in (
        ("stdout", done.stdout, test.expected_output, test.excluded_output),
        ("stderr", done.stderr, test.expected_error, test.excluded_error),
    ):
        missing = sorted(set(wanted) - set(_matches(wanted, text)))
        expect(not missing, f"{test.name}: {stream} of `{shown}`", expected=f"matches {missing}", found=_tail(text))
        present = _matches(unwanted, text)
        expect(not present, f"{test.name}: {stream} of `{shown}`", expected=f"no match of {present}", found=_tail(text))


@pytest.mark.parametrize("test", CHECKS.file_existence_tests, ids=[t.name for t in CHECKS.file_existence_tests])
def test_file(host: Any, test: FileExistenceTest) -> None:
    # stat, not testinfra's File: one exec gives existence, the type bits, owner and group; a symlink is itself.
    done = host.run(f"stat -c '%f %u %g' -- {shlex.quote(test.path)}")
    exists = done.rc == 0
    expect(exists == test.should_exist, f"{test.name}: {test.path}",
           expected="exists" if test.should_exist else "absent",
           found="exists" if exists else f"absent ({_tail(done.stderr)})")  # fmt: skip
    if not exists:
        return
    raw_mode, uid, gid = done.stdout.split()
    mode = int(raw_mode, 16)
    if test.permissions:
        found = stat.filemode(mode) if not test.permissions[0].isdigit() else f"{stat.S_IMODE(mode):04o}"
        wanted = test.permissions if not test.permissions[0].isdigit() else f"{int(test.permissions, 8):04o}"
        expect(found == wanted, f"{test.name}: permissions of {test.path}", expected=wanted, found=found)
    for what, want, got in (("uid", test.uid, int(uid)), ("gid", test.gid, int(gid))):
        expect(want is None or want == got, f"{test.name}: {what} of {test.path}", expected=want, found=got)


@pytest.mark.parametrize("test", CHECKS.file_content_tests, ids=[t.name for t in CHECKS.file_content_tests])
def test_file_content(host: Any, test: FileContentTest) -> None:
    done = host.run(f"cat -- {shlex.quote(test.path)}")
    expect(done.rc == 0, f"{test.name}: {test.path} readable", expected="a file", found=_tail(done.stderr))
    missing = sorted(set(test.expected_contents) - set(_matches(test.expected_contents, done.stdout)))
    expect(not missing, f"{test.name}: contents of {test.path}", expected=f"matches {missing}", found=_tail(done.stdout))
    present = _matches(test.excluded_contents, done.stdout)
    expect(not present, f"{test.name}: contents of {test.path}", expected=f"no match of {present}",
           found=_tail(done.stdout))  # fmt: skip


def _metadata_cases() -> list[Any]:
    meta = CHECKS.metadata_test
    if meta is None:
        return []
    cases: list[tuple[str, object]] = [(f"env {kv.key}", kv) for kv in meta.env]
    cases += [(f"label {kv.key}", kv) for kv in meta.labels]
    cases += [(key, getattr(meta, key)) for key in ("entrypoint", "cmd", "workdir", "user") if getattr(meta, key) is not None]
    cases += [(f"exposed port {p}", p) for p in meta.exposed_ports]
    cases += [(f"unexposed port {p}", p) for p in meta.unexposed_ports]
    return [pytest.param(what, value, id=what) for what, value in cases]


def _port(text: str) -> str:
    return text if "/" in text else f"{text}/tcp"


@pytest.mark.parametrize(("what", "wanted"), _metadata_cases())
def test_metadata(what: str, wanted: object) -> None:
    config = image_config()
    if isinstance(wanted, KeyValue):
        _pair(what, wanted, config.env if what.startswith("env ") else config.labels)
    elif what.startswith(("exposed port", "unexposed port")):
        exposed = {_port(p) for p in config.exposed_ports}
        should = what.startswith("exposed")
        expect((_port(str(wanted)) in exposed) == should, f"metadata: {what}",
               expected="exposed" if should else "not exposed", found=sorted(exposed) or "(none exposed)")  # fmt: skip
    else:
        found = {"entrypoint": config.entrypoint or [], "cmd": config.cmd or [],
                 "workdir": config.workdir, "user": config.user}[what]  # fmt: skip
        want = list(wanted) if isinstance(wanted, tuple) else wanted
        expect(found == want, f"metadata: {what}", expected=want, found=found)


def _pair(what: str, wanted: KeyValue, values: dict[str, str]) -> None:
    found = values.get(wanted.key)
    if found is None:
        ok = False
    else:
        ok = re.search(wanted.value, found) is not None if wanted.is_regex else found == wanted.value
    expect(ok, f"metadata: {what}", expected=("matches " if wanted.is_regex else "") + repr(wanted.value),
           found=repr(redact(found)) if found is not None else "(not set)")  # fmt: skip
