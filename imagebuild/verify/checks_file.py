"""A project's own checks (``checks.toml``): typed, validated before the engine is asked, then handed to the
check modules as JSON.

The schema is container-structure-test's (commandTests, fileExistenceTests, fileContentTests,
metadataTest) with TOML's snake_case names, so its users recognise every key. Each problem is one line
naming the file, the line and the key: tomllib reports syntax errors with their line, and a key's line
is found in the text (its table header, then the key inside it).
"""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from imagebuild.errors import ConfigError
from imagebuild.inputs.values import ABSOLUTE_PATH, ENV_NAME
from imagebuild.launcher.text import shown, text_problem
from imagebuild.secrets import secret_value_reason

CHECKS_FILE = "checks.toml"  # at the project root; verify --checks names another
MAX_NAME_CHARS = 120
# As `ls -l` shows a mode (container-structure-test's `permissions`), or an octal "0755".
PERMISSIONS = re.compile(r"[-dlcbps][-r][-w][-xsS][-r][-w][-xsS][-r][-w][-xtT]|0?[0-7]{3,4}")
PORT = re.compile(r"[0-9]{1,5}(/(tcp|udp|sctp))?")


@dataclass(frozen=True, kw_only=True)
class CommandTest:
    name: str
    line: int
    command: tuple[str, ...] | str  # argv, or a string run by `sh -c`
    env: Mapping[str, str] = field(default_factory=dict)
    exit_code: int = 0
    expected_output: tuple[str, ...] = ()  # regexes stdout must match (re.search, MULTILINE)
    excluded_output: tuple[str, ...] = ()
    expected_error: tuple[str, ...] = ()  # the same for stderr
    excluded_error: tuple[str, ...] = ()

    def shell_line(self) -> str:
        """What testinfra hands `sh -c` in the container: argv quoted word by word, a string as sh -c's script."""
        argv = list(self.command) if isinstance(self.command, tuple) else ["sh", "-c", self.command]
        prefix = ["env", *(f"{k}={v}" for k, v in sorted(self.env.items()))] if self.env else []
        return shlex.join([*prefix, *argv])


@dataclass(frozen=True, kw_only=True)
class FileExistenceTest:
    name: str
    line: int
    path: str
    should_exist: bool = True
    permissions: str = ""  # "-rwxr-xr-x" (type and mode) or "0755" (mode only); "" unchecked
    uid: int | None = None
    gid: int | None = None


@dataclass(frozen=True, kw_only=True)
class FileContentTest:
    name: str
    line: int
    path: str
    expected_contents: tuple[str, ...] = ()
    excluded_contents: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class KeyValue:
    key: str
    value: str
    is_regex: bool = False


@dataclass(frozen=True, kw_only=True)
class MetadataTest:
    line: int = 0
    env: tuple[KeyValue, ...] = ()
    labels: tuple[KeyValue, ...] = ()
    entrypoint: tuple[str, ...] | None = None
    cmd: tuple[str, ...] | None = None
    workdir: str | None = None
    user: str | None = None
    exposed_ports: tuple[str, ...] = ()
    unexposed_ports: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ChecksFile:
    path: str
    command_tests: tuple[CommandTest, ...] = ()
    file_existence_tests: tuple[FileExistenceTest, ...] = ()
    file_content_tests: tuple[FileContentTest, ...] = ()
    metadata_test: MetadataTest | None = None

    @property
    def count(self) -> int:
        return len(self.command_tests) + len(self.file_existence_tests) + len(self.file_content_tests)

    @property
    def empty(self) -> bool:
        """Nothing to check: no tests, and no [metadata_test] or one with no keys."""
        meta = self.metadata_test
        return self.count == 0 and (meta is None or meta == MetadataTest(line=meta.line))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChecksFile:
        def seq(value: Any) -> Any:
            return tuple(value) if isinstance(value, list) else value

        meta = data.get("metadata_test")
        return cls(
            path=data["path"],
            command_tests=tuple(CommandTest(**{k: seq(v) for k, v in t.items()}) for t in data["command_tests"]),
            file_existence_tests=tuple(FileExistenceTest(**t) for t in data["file_existence_tests"]),
            file_content_tests=tuple(
                FileContentTest(**{k: seq(v) for k, v in t.items()}) for t in data["file_content_tests"]
            ),
            metadata_test=None
            if meta is None
            else MetadataTest(
                **{
                    **{k: seq(v) for k, v in meta.items()},
                    "env": tuple(KeyValue(**kv) for kv in meta["env"]),
                    "labels": tuple(KeyValue(**kv) for kv in meta["labels"]),
                }
            ),
        )


EMPTY = ChecksFile(path="")
_T = TypeVar("_T")


class _Lines:
    """Where a table or key is in the file's text, for the one-line error."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()

    def table(self, section: str, index: int) -> int:
        """The line of the ``index``-th ``[[section]]`` (or ``[section]``, or ``section =``), 1-based."""
        header = re.compile(rf"\s*\[\[?\s*{re.escape(section)}\s*\]\]?\s*(#.*)?$")
        found = [n for n, line in enumerate(self.lines, 1) if header.fullmatch(line)]
        if index < len(found):
            return found[index]
        return self.key(0, section) or 1

    def key(self, start: int, key: str) -> int:
        """The first line at or after ``start`` (until the next table) that sets ``key``; 0 if none."""
        assignment = re.compile(rf"\s*\"?{re.escape(key)}\"?\s*=")
        for n in range(max(start, 1), len(self.lines) + 1):
            line = self.lines[n - 1]
            if n > start and start and line.lstrip().startswith("["):
                break
            if assignment.match(line):
                return n
        return start


class _Reader:
    """Reads one table of the file, raising ConfigError with file, line and key on the first problem."""

    def __init__(self, path: str, lines: _Lines, table: Mapping[str, Any], where: str, line: int) -> None:
        self.path, self.lines, self.table, self.where, self.line = path, lines, table, where, line

    def fail(self, key: str, problem: str) -> NoReturn:
        line = self.lines.key(self.line, key) if key else self.line
        shown_key = f"{self.where}.{key}" if key else self.where
        msg = f"{self.path}:{line}: {shown_key} {problem}"
        raise ConfigError(msg)

    def only(self, allowed: set[str]) -> None:
        for key in self.table:
            if key not in allowed:
                known = ", ".join(sorted(allowed))
                self.fail(str(key), f"is not a key of {self.where.split('[')[0]}; known: {known}")

    def get(self, key: str, kind: type[_T], default: _T | None = None, *, required: bool = False) -> _T:
        if key not in self.table:
            if required:
                self.fail("", f"has no {key}; it is required")
            return default  # type: ignore[return-value]
        value = self.table[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            self.fail(key, f"= {shown(value)} must be {_KIND_NAMES.get(kind, kind.__name__)}")
        if isinstance(value, str) and (problem := _text_problem(value)):
            self.fail(key, problem)
        return value

    def strings(self, key: str, check: Callable[[str], str | None] | None = None) -> tuple[str, ...]:
        values = self.get(key, list, [])
        for value in values:
            if not isinstance(value, str):
                self.fail(key, f"holds {shown(value)}; it must be a list of strings")
            if problem := _text_problem(value):  # not shown: it may be the credential
                self.fail(key, f"holds a string that {problem}")
            if check and (problem := check(value)):
                self.fail(key, f"holds {shown(value)}, which {problem}")
        return tuple(values)

    def regexes(self, key: str) -> tuple[str, ...]:
        return self.strings(key, _regex_problem)

    def image_path(self, key: str) -> str:
        value = self.get(key, str, required=True)
        if problem := ABSOLUTE_PATH.problem(value):
            self.fail(key, f"= {shown(value)} {problem}")
        return value


def _text_problem(value: str) -> str | None:
    """A value reaches a shell line in the container and the report: one line, and no credential in it."""
    return text_problem(value) or secret_value_reason(value)


_KIND_NAMES = {str: "a string", int: "an integer", bool: "true or false", list: "a list", dict: "a table"}


def _regex_problem(value: str) -> str | None:
    try:
        re.compile(value)
    except re.error as e:
        return f"is not a regular expression ({e})"
    return None


def load_checks(path: Path) -> ChecksFile:
    """The checks in ``path``; ConfigError (one line: file, line, key) for anything malformed."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        msg = f"{path}: cannot read the checks file ({e.__class__.__name__}: {e}); fix it or pass --checks FILE"
        raise ConfigError(msg) from e
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        msg = f"{path}: not valid TOML: {e}"
        raise ConfigError(msg) from e
    lines = _Lines(text)
    top = _Reader(str(path), lines, data, "checks file", 1)
    top.only({"schema_version", "command_tests", "file_existence_tests", "file_content_tests", "metadata_test"})
    version = top.get("schema_version", int, 1)
    if version != 1:
        top.fail("schema_version", f"= {version} is not supported; this imagebuild reads schema_version 1")
    names: dict[str, int] = {}

    def tables(section: str) -> list[_Reader]:
        readers = []
        for i, table in enumerate(top.get(section, list, [])):
            line = lines.table(section, i)
            if not isinstance(table, dict):
                msg = f"{path}:{line}: {section} holds {shown(table)}; each entry is a table"
                raise ConfigError(msg)
            reader = _Reader(str(path), lines, table, f"{section}[{i}]", line)
            name = reader.get("name", str, required=True).strip()
            if not name or len(name) > MAX_NAME_CHARS:
                reader.fail("name", f"= {shown(name)} must be 1 to {MAX_NAME_CHARS} characters")
            if name in names:
                reader.fail("name", f"= {shown(name)} is already the name of the check at line {names[name]}")
            names[name] = reader.line
            readers.append(reader)
        return readers

    return ChecksFile(
        path=str(path),
        command_tests=tuple(_command_test(r) for r in tables("command_tests")),
        file_existence_tests=tuple(_file_existence_test(r) for r in tables("file_existence_tests")),
        file_content_tests=tuple(_file_content_test(r) for r in tables("file_content_tests")),
        metadata_test=_metadata_test(str(path), lines, top.get("metadata_test", dict)),
    )


def _command_test(r: _Reader) -> CommandTest:
    r.only({"name", "command", "env", "exit_code", "expected_output", "excluded_output",
            "expected_error", "excluded_error"})  # fmt: skip
    if "command" not in r.table:
        r.fail("", "has no command; give an argv list, or a string run by sh -c")
    raw = r.table["command"]
    command: tuple[str, ...] | str
    if not isinstance(raw, str | list):
        r.fail("command", f"= {shown(raw)} must be a string (run by sh -c) or a list of strings (argv)")
    if isinstance(raw, str):
        command = r.get("command", str)
    else:
        command = r.strings("command")
        if not command:
            r.fail("command", "is an empty list; give the program and its arguments")
    env = r.get("env", dict, {})
    for key, value in env.items():
        if ENV_NAME.problem(key):
            r.fail("env", f"has the name {shown(key)}, which is not {ENV_NAME.name}")
        if not isinstance(value, str):
            r.fail("env", f"has {key} = {shown(value)}; values are strings")
        if problem := _text_problem(value):  # not shown: it may be the credential
            r.fail("env", f"has {key}, whose value {problem}")
    exit_code = r.get("exit_code", int, 0)
    if not 0 <= exit_code <= 255:
        r.fail("exit_code", f"= {exit_code} must be 0 to 255")
    return CommandTest(
        name=r.table["name"].strip(), line=r.line, command=command, env=dict(env), exit_code=exit_code,
        expected_output=r.regexes("expected_output"), excluded_output=r.regexes("excluded_output"),
        expected_error=r.regexes("expected_error"), excluded_error=r.regexes("excluded_error"),
    )  # fmt: skip


def _file_existence_test(r: _Reader) -> FileExistenceTest:
    r.only({"name", "path", "should_exist", "permissions", "uid", "gid"})
    permissions = r.get("permissions", str, "")
    if permissions and not PERMISSIONS.fullmatch(permissions):
        r.fail("permissions", f"= {shown(permissions)} must read like ls -l (-rwxr-xr-x) or be octal (0755)")
    ids = {key: r.get(key, int) for key in ("uid", "gid")}
    for key, value in ids.items():
        if value is not None and value < 0:
            r.fail(key, f"= {value} must be 0 or more")
    return FileExistenceTest(
        name=r.table["name"].strip(), line=r.line, path=r.image_path("path"),
        should_exist=r.get("should_exist", bool, True), permissions=permissions, **ids,
    )  # fmt: skip


def _file_content_test(r: _Reader) -> FileContentTest:
    r.only({"name", "path", "expected_contents", "excluded_contents"})
    expected, excluded = r.regexes("expected_contents"), r.regexes("excluded_contents")
    if not expected and not excluded:
        r.fail("", "has neither expected_contents nor excluded_contents; give at least one regex")
    return FileContentTest(
        name=r.table["name"].strip(), line=r.line, path=r.image_path("path"),
        expected_contents=expected, excluded_contents=excluded,
    )  # fmt: skip


def _metadata_test(path: str, lines: _Lines, table: Mapping[str, Any] | None) -> MetadataTest | None:
    if table is None:
        return None
    r = _Reader(path, lines, table, "metadata_test", lines.table("metadata_test", 0))
    r.only({"env", "labels", "entrypoint", "cmd", "workdir", "user", "exposed_ports", "unexposed_ports"})

    def pairs(key: str) -> tuple[KeyValue, ...]:
        out = []
        for item in r.get(key, list, []):
            if not isinstance(item, dict) or set(item) - {"key", "value", "is_regex"} or "key" not in item:
                r.fail(key, f"holds {shown(item)}; each entry is {{ key = ..., value = ..., is_regex = false }}")
            kv = _Reader(path, lines, item, f"metadata_test.{key}", r.line)
            pair = KeyValue(key=kv.get("key", str), value=kv.get("value", str, ""), is_regex=kv.get("is_regex", bool, False))
            if pair.is_regex and (problem := _regex_problem(pair.value)):
                r.fail(key, f"has {pair.key} = {shown(pair.value)}, which {problem}")
            out.append(pair)
        return tuple(out)

    def argv(key: str) -> tuple[str, ...] | None:
        return r.strings(key) if key in table else None

    def port(value: str) -> str | None:
        return None if PORT.fullmatch(value) else "is not a port (8000 or 8000/tcp)"

    return MetadataTest(
        line=r.line, env=pairs("env"), labels=pairs("labels"), entrypoint=argv("entrypoint"), cmd=argv("cmd"),
        workdir=r.get("workdir", str), user=r.get("user", str),
        exposed_ports=r.strings("exposed_ports", port), unexposed_ports=r.strings("unexposed_ports", port),
    )  # fmt: skip
