"""Every `imagebuild ...` command README.md and docs/*.md show names a verb and flags the real parser has.

Commands come from code blocks (a line, or a part after `&&`, that starts with `imagebuild `) and from
inline code spans. A span in grammar notation (`[--arch ARCH]`, `--dry-run\\|--check`, `(A \\| B)`, `...`)
is read as a list of alternatives; placeholders (`DIR`, `<64 hex>`, `VERB`) stand for any value. A
flag's value is checked against its choices when it has them, so a doc cannot show `--compress lz4`.
Required arguments are not demanded: prose names a verb alone (`imagebuild slurm` writes ...).
"""

from __future__ import annotations

import argparse
import re
import shlex

import pytest

from imagebuild.cli.app import build_parser
from tests import REPO

PAGES = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
FENCE = re.compile(r"^[ \t]*```[^\n]*$(.*?)^[ \t]*```", re.S | re.M)
SPAN = re.compile(r"`(imagebuild [^`]+)`")
GRAMMAR = re.compile(r"[\[\]()|]|\.\.\.")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_:\[\]]*$|<[^>]*>")
SHELL_ENDS = ("|", "&&", "||", ";")


def commands(text: str) -> list[str]:
    """The imagebuild command lines of a page, continuation lines joined, spans on one line."""
    found: list[str] = []
    for block in FENCE.findall(text):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            for part in re.split(r"&&|;", line.strip().removeprefix("$ ")):
                if part.strip().startswith("imagebuild "):
                    found.append(part.strip())
    found += [" ".join(m.group(1).split()) for m in SPAN.finditer(FENCE.sub("", text))]
    return found


def _tokens(command: str) -> list[str]:
    grammar = bool(GRAMMAR.search(command.split(" #", 1)[0]))
    words = shlex.split(command, comments=True)[1:]
    if not grammar:  # a shell line: it ends at a pipe or a redirection
        ends = [i for i, w in enumerate(words) if w in SHELL_ENDS or w.startswith((">", "2>", "<"))]
        return words[: ends[0]] if ends else words
    # Grammar: alternatives are words of their own, brackets and ellipses are notation.
    split = [part for word in words for part in word.split("|") if part]
    return [w.strip("[]()").removesuffix("...").strip("[]()") for w in split if w.strip("[]()")]


def problems(command: str) -> list[str]:
    """What the real parser does not have: an unknown verb, an unknown flag, a value not among the choices."""
    parser, verbs = build_parser()
    names = {verb.name for verb in verbs}
    actions: dict[str, argparse.Action] = parser._option_string_actions
    verb: str | None = None
    found: list[str] = []
    tokens = _tokens(command)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token.startswith("-") and token != "-":
            flag, has_value, _ = token.partition("=")
            action = actions.get(flag)
            if action is None:
                found.append(
                    f"{flag}: not an option of `{' '.join(['imagebuild', *([verb] if verb else [])])}`"
                )
                continue
            takes = action.nargs != 0
            optional = action.nargs == "?"
            if takes and not has_value and i < len(tokens):
                value = tokens[i]
                if optional and value.startswith("-"):
                    continue
                i += 1
                if action.choices and not PLACEHOLDER.search(value) and value not in action.choices:
                    found.append(f"{flag} {value}: not one of {sorted(action.choices)}")
            continue
        if verb is None:
            if token == "VERB":  # `imagebuild VERB --help`: any verb; its flags are the top level's
                verb = "VERB"
                continue
            if token not in names:
                found.append(f"{token}: not a verb (verbs: {', '.join(sorted(names))})")
                return found
            verb = token
            actions = verbs.parser(verb)._option_string_actions
    return found


def shown_commands() -> list[tuple[str, str]]:
    return [
        (page.relative_to(REPO).as_posix(), c) for page in PAGES for c in commands(page.read_text("utf-8"))
    ]


SHOWN = shown_commands()


def test_the_pages_show_commands_of_every_verb() -> None:
    """Not vacuous: the extraction finds the pages' commands, and every verb is shown somewhere."""
    assert len(SHOWN) > 50
    verbs = {verb.name for verb in build_parser()[1]}
    shown = {tok for _, c in SHOWN for tok in _tokens(c)[:3]}
    assert verbs <= shown, verbs - shown


@pytest.mark.parametrize(("page", "command"), SHOWN, ids=[f"{p}:{c[:60]}" for p, c in SHOWN])
def test_every_shown_command_parses(page: str, command: str) -> None:
    assert problems(command) == [], f"{page}: {command}"


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("imagebuild frobnicate", "frobnicate: not a verb"),
        ("imagebuild lock --no-such-flag", "--no-such-flag: not an option"),
        ("imagebuild export -o /x --compress lz4", "--compress lz4: not one of"),
        ("imagebuild render [--arch gfx942] [--nope F]", "--nope: not an option"),
        ("imagebuild lock [--dry-run\\|--check\\|--sometimes]", "--sometimes: not an option"),
        ("imagebuild -C DIR slurm --nodes 2 --recipes x", "--recipes: not an option"),
    ],
)
def test_a_command_the_parser_does_not_have_is_caught(command: str, expected: str) -> None:
    assert any(expected in problem for problem in problems(command)), problems(command)


def test_grammar_and_shell_lines_are_read_as_written() -> None:
    assert problems("imagebuild render --allow-unpinned -o - > gfx942.Dockerfile") == []
    assert (
        problems("imagebuild slurm (--image REF@sha256:... \\| --from-record [RECORD]) [-o FILE\\|-]") == []
    )
    assert problems("imagebuild build --progress plain --network host") == []
    assert _tokens("imagebuild -C my-image render # a comment") == ["-C", "my-image", "render"]


def test_the_pages_exist_and_link_to_each_other() -> None:
    index = (REPO / "docs" / "README.md").read_text("utf-8")
    for page in PAGES[1:]:
        if page.name != "README.md":
            assert f"]({page.name})" in index, f"docs/README.md does not link {page.name}"
    for page in PAGES:
        text = page.read_text("utf-8")
        for target in re.findall(r"\]\(([^)#]+\.md)(?:#[^)]*)?\)", text):
            assert (page.parent / target).is_file(), f"{page.name}: link to {target} goes nowhere"
    assert len((REPO / "README.md").read_text("utf-8").splitlines()) <= 250
