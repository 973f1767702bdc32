"""Which checks run: ``verify -k EXPR`` with pytest's own keyword grammar, and ``verify --list``.

Every check but the layer scan is a pytest item, so pytest selects them itself; the layer scan runs
outside pytest and is matched here with pytest's expression evaluator and the names pytest would give
it (its test name and its group's module), so one ``-k`` means the same for both. The list is a pytest
collection of the same modules with the same context: no image, no engine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _pytest.mark.expression as pytest_expression  # pytest's -k grammar (private; pytest is a dependency)
from _pytest.mark.expression import Expression

from imagebuild.errors import CommandError, ConfigError, VerifyError
from imagebuild.launcher.text import shown, text_problem
from imagebuild.verify.check_session import RAN, check_session
from imagebuild.verify.checks.support import CUSTOM_MODULE
from imagebuild.verify.checks_file import ChecksFile
from imagebuild.verify.layers import LAYER_CHECK_GROUP, LAYER_CHECK_NAME

# pytest 8 raises its ParseError for a bad -k, pytest 9 a SyntaxError.
PARSE_ERRORS = (SyntaxError, getattr(pytest_expression, "ParseError", SyntaxError))
CUSTOM_KINDS = {"test_command": "command", "test_file": "file", "test_file_content": "file_content",
                "test_metadata": "metadata"}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ListedCheck:
    name: str  # as the report and JUnit name it: test_env[HF_HOME], test_command[vllm imports]
    kind: str  # the built-in group (config, versions, ...) or the checks file's kind (command, file, ...)
    source: str  # the module that defines it, or checks.toml:LINE

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "kind": self.kind, "source": self.source}


def keyword_expression(keyword: str) -> Expression:
    """``-k``'s expression, compiled as pytest compiles it; ConfigError naming the flag otherwise."""
    problem = text_problem(keyword)
    if problem:
        msg = f"-k {shown(keyword)} {problem}"
        raise ConfigError(msg)
    try:
        return Expression.compile(keyword)
    except PARSE_ERRORS as e:
        reason = str(getattr(e, "message", None) or e.msg)
        msg = f"-k {shown(keyword)} is not a pytest keyword expression ({reason}); e.g. -k 'config and not label'"
        raise ConfigError(msg) from e


def layer_check_selected(keyword: str | None) -> bool:
    if keyword is None:
        return True
    names = (LAYER_CHECK_NAME, f"test_{LAYER_CHECK_GROUP}.py")

    def matches(subname: str, /, **_: object) -> bool:  # pytest: case-insensitive substring of a name
        return any(subname.lower() in name.lower() for name in names)

    return bool(keyword_expression(keyword).evaluate(matches))


def list_checks(context: Mapping[str, Any], checks_file: ChecksFile, keyword: str | None) -> tuple[ListedCheck, ...]:
    """Every check verify would run with ``keyword``, in run order, the layer scan last."""
    try:
        with check_session(context, ["--collect-only"], keyword=keyword, collected=True) as session:
            if session.done.returncode not in RAN or not session.collected.is_file():
                tail = "\n".join(f"{session.done.stdout}{session.done.stderr}".strip().splitlines()[-20:])
                msg = f"the image checks could not be collected (pytest exit {session.done.returncode}):\n{tail}"
                raise VerifyError(msg)
            items = json.loads(session.collected.read_text(encoding="utf-8"))
    except CommandError as e:
        msg = f"the image checks could not be collected: {e}"
        raise VerifyError(msg) from e
    lines = {
        name: test.line
        for tests in (checks_file.command_tests, checks_file.file_existence_tests, checks_file.file_content_tests)
        for name, test in ((t.name, t) for t in tests)
    }
    listed = [_listed(item, checks_file, lines) for item in items]
    if layer_check_selected(keyword):
        listed.append(ListedCheck(name=LAYER_CHECK_NAME, kind=LAYER_CHECK_GROUP, source="imagebuild/verify/layers.py"))
    return tuple(listed)


def _listed(item: Mapping[str, str], checks_file: ChecksFile, lines: Mapping[str, int]) -> ListedCheck:
    file = Path(item["file"])
    if file.name != CUSTOM_MODULE:
        return ListedCheck(name=item["name"], kind=item["group"], source=f"imagebuild/verify/checks/{file.name}")
    function, _, param = item["name"].partition("[")
    param = param.removesuffix("]")
    line = checks_file.metadata_test.line if function == "test_metadata" and checks_file.metadata_test else lines.get(param, 0)
    return ListedCheck(name=item["name"], kind=CUSTOM_KINDS.get(function, "custom"),
                       source=f"{checks_file.path}:{line}" if line else checks_file.path)  # fmt: skip


def format_list(listed: tuple[ListedCheck, ...]) -> str:
    width = max((len(c.name) for c in listed), default=4)
    kind_width = max((len(c.kind) for c in listed), default=4)
    rows = [f"{'NAME':<{width}}  {'KIND':<{kind_width}}  SOURCE"]
    rows += [f"{c.name:<{width}}  {c.kind:<{kind_width}}  {c.source}" for c in listed]
    return "\n".join(rows)


__all__ = ["ListedCheck", "format_list", "keyword_expression", "layer_check_selected", "list_checks"]
