"""How a verb joins the command line, so that every verb behaves the same.

A verb registers a :class:`Verb` (its name, what it does, its handler, an
example, the exit codes it uses, what its ``--json`` prints, whether it has
``--progress``) and then adds its own arguments to the parser it gets back.
Registration adds what every verb shares: the global flags, the common options
(``--arch``/``--pins`` for verbs that read the checkout, ``--json``,
``--progress`` for verbs that show progress), all accepted before the verb and
after it, and an epilog with the examples and the exit codes from
``imagebuild.errors``. ``tests/unit/test_cli_contract.py`` checks each
registered verb for this; docs/commands.md's "Command-line grammar" is the table.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from imagebuild.cli import arguments
from imagebuild.errors import ExitCode
from imagebuild.inputs.layout import DEFAULT_ARCH
from imagebuild.log import logger
from imagebuild.project import Project, find_project

# Every verb can be given bad input, be interrupted and find its reader gone.
COMMON_EXIT_CODES = (ExitCode.OK, ExitCode.BAD_INPUT, ExitCode.INTERRUPTED, ExitCode.PIPE_CLOSED)
AFTER = "_after_verb"  # dest suffix of a global flag given after the verb
BEFORE = "_before_verb"  # dest suffix of a common option given before the verb
HELP_WIDTH = 100


class UsageError(Exception):
    """A command line argparse cannot parse; ``main`` reports it as bad input (one line, exit 2)."""

    def __init__(self, message: str, prog: str) -> None:
        super().__init__(message)
        self.prog = prog


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error raised (main prints one line) instead of usage text and exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.prog)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the epilog's table as written; descriptions are wrapped by ``_wrap``."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=HELP_WIDTH, max_help_position=32)


@dataclass(frozen=True, kw_only=True)
class GlobalFlag:
    """A flag of imagebuild itself, accepted before the verb and after it."""

    flags: tuple[str, ...]
    dest: str
    default: Any
    options: dict[str, Any]

    def merged(self, args: argparse.Namespace) -> Any:
        before = getattr(args, self.dest)
        if not hasattr(args, self.dest + AFTER):
            return before
        after = getattr(args, self.dest + AFTER)
        if self.options.get("action") == "count":
            return before + after
        if self.options.get("action") == "store_true":
            return before or after
        return after  # a value given after the verb wins, as the later of two options does


GLOBAL_FLAGS = (
    GlobalFlag(
        flags=("-v", "--verbose"),
        dest="verbose",
        default=0,
        options={
            "action": "count",
            "help": "more output on stderr: build step logs, lock's retries, commands run",
        },
    ),
    GlobalFlag(
        flags=("-q", "--quiet"),
        dest="quiet",
        default=False,
        options={"action": "store_true", "help": "no progress on stderr, only warnings and errors"},
    ),
    GlobalFlag(
        flags=("--traceback",),
        dest="traceback",
        default=False,
        options={"action": "store_true", "help": "show the Python traceback of an error"},
    ),
    GlobalFlag(
        flags=("-C", "--project"),
        dest="project",
        default=None,
        options={
            "type": Path,
            "metavar": "DIR",
            "help": "run as if started in DIR, the project (not searched for upwards)",
        },
    ),
)
PROGRESS_MODES = ("auto", "plain", "tty")
PROGRESS_HELP = (
    "plain: a line per step start, end and 30 s heartbeat; tty: one live line; "
    "auto (default): tty when stderr is a terminal. Under GitHub Actions steps are collapsible groups"
)


@dataclass(frozen=True, kw_only=True)
class CommonOption:
    """An option of the verbs it applies to, accepted before the verb too (as global flags are).

    Before a verb it does not apply to it is a usage error naming the verbs that take it.
    """

    flags: tuple[str, ...]
    dest: str
    default: Any
    options: dict[str, Any]
    applies: Callable[[Verb], bool]
    verbs_that: str  # "verbs that ...": the error before a verb without it names them
    help: Callable[[Verb | None], str]  # None: the help before the verb

    def merged(self, args: argparse.Namespace) -> Any:
        before = getattr(args, self.dest + BEFORE, self.default)
        after = getattr(args, self.dest + AFTER, before)  # given after the verb, it wins
        if self.options.get("action") == "store_true":
            return before or after
        return after


def _json_help(verb: Verb | None) -> str:
    what = verb.json if verb is not None else "the verb's result"
    return (
        f"print {what} as one JSON document on stdout, schema_version first; on failure "
        '{"schema_version": 1, "error": MESSAGE, "exit_code": N}'
    )


COMMON_OPTIONS = (
    CommonOption(
        flags=("--arch",),
        dest="arch",
        default=DEFAULT_ARCH,
        options={"metavar": "ARCH"},
        applies=lambda verb: verb.checkout,
        verbs_that="verbs that read the checkout",
        help=lambda _: f"arch profile in stages/arch/ (default {DEFAULT_ARCH})",
    ),
    CommonOption(
        flags=("--pins",),
        dest="pins",
        default=None,
        options={"type": arguments.pins_file, "metavar": "FILE"},
        applies=lambda verb: verb.checkout,
        verbs_that="verbs that read the checkout",
        help=lambda _: "pins file (default: pins.toml of the checkout)",
    ),
    CommonOption(
        flags=("--json",),
        dest="json",
        default=False,
        options={"action": "store_true"},
        applies=lambda verb: verb.json is not None,
        verbs_that="verbs with a JSON document",
        help=_json_help,
    ),
    CommonOption(
        flags=("--progress",),
        dest="progress",
        default=None,
        options={"choices": PROGRESS_MODES},
        applies=lambda verb: verb.progress,
        verbs_that="verbs that show progress",
        help=lambda verb: (
            PROGRESS_HELP if verb is not None else f"for verbs that show progress: {PROGRESS_HELP}"
        ),
    ),
)


def add_common_options_before_verb(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "common options (before or after the verb, for the verbs they apply to)"
    )
    for option in COMMON_OPTIONS:
        group.add_argument(
            *option.flags,
            dest=option.dest + BEFORE,
            default=argparse.SUPPRESS,
            help=option.help(None),
            **option.options,
        )


def merge_common_options(args: argparse.Namespace, verbs: Iterable[Verb]) -> None:
    """One value per common option of the verb, wherever it was given; refused before a verb without it."""
    verb: Verb = args.verb
    for option in COMMON_OPTIONS:
        given_before = hasattr(args, option.dest + BEFORE)
        if option.applies(verb):
            setattr(args, option.dest, option.merged(args))
        elif given_before:
            names = ", ".join(v.name for v in verbs if option.applies(v))
            msg = f"{option.flags[-1]} does not apply to `{verb.name}` (only to {option.verbs_that}: {names})"
            raise UsageError(msg, f"imagebuild {verb.name}")
        for suffix in (BEFORE, AFTER):
            if hasattr(args, option.dest + suffix):
                delattr(args, option.dest + suffix)


def add_global_flags(parser: argparse.ArgumentParser, *, after_verb: bool) -> None:
    group = parser.add_argument_group("global options (before or after the verb)")
    for flag in GLOBAL_FLAGS:
        dest = flag.dest + AFTER if after_verb else flag.dest
        default = argparse.SUPPRESS if after_verb else flag.default
        group.add_argument(*flag.flags, dest=dest, default=default, **flag.options)


def merge_global_flags(args: argparse.Namespace) -> None:
    """One value per global flag, wherever it was given."""
    for flag in GLOBAL_FLAGS:
        value = flag.merged(args)
        if hasattr(args, flag.dest + AFTER):
            delattr(args, flag.dest + AFTER)
        setattr(args, flag.dest, value)


@dataclass(frozen=True, kw_only=True)
class Verb:
    name: str
    summary: str  # one line, for `imagebuild --help` and the top of the verb's help
    run: Callable[[argparse.Namespace], int]
    examples: tuple[str, ...]  # command lines, shown in --help
    exit_codes: tuple[ExitCode, ...] = ()  # besides COMMON_EXIT_CODES
    json: str | None = None  # what --json prints; None: no --json (every verb has one today)
    progress: bool = False  # has --progress
    checkout: bool = True  # reads the checkout: has --arch and --pins
    notes: str = ""  # more text for the epilog

    @property
    def all_exit_codes(self) -> tuple[ExitCode, ...]:
        return tuple(sorted({*COMMON_EXIT_CODES, *self.exit_codes}))

    def epilog(self) -> str:
        parts = [self.notes] if self.notes else []
        parts.append("examples:\n" + "\n".join(f"  {line}" for line in self.examples))
        parts.append(exit_code_table(self.all_exit_codes))
        return "\n\n".join(parts)


def exit_code_table(codes: Sequence[ExitCode] = tuple(ExitCode)) -> str:
    return "exit codes:\n" + "\n".join(f"  {int(code):<4} {code.meaning}" for code in codes)


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=HELP_WIDTH)


class Verbs:
    """The registry: ``add`` gives a verb its parser with everything verbs share."""

    def __init__(self, sub: argparse._SubParsersAction[Parser]) -> None:
        self._sub = sub
        self._verbs: dict[str, Verb] = {}
        self._parsers: dict[str, Parser] = {}

    def add(self, verb: Verb) -> Parser:
        if verb.name in self._verbs:
            msg = f"verb {verb.name!r} registered twice"
            raise AssertionError(msg)
        self._verbs[verb.name] = verb
        parser = self._sub.add_parser(
            verb.name,
            help=verb.summary,
            description=_wrap(verb.summary),
            epilog=verb.epilog(),
            formatter_class=HelpFormatter,
        )
        parser.set_defaults(verb=verb)
        # The verb's own options come first in its help (the parser's default group); these after them.
        common = parser.add_argument_group("common options (before or after the verb)")
        for option in COMMON_OPTIONS:
            if option.applies(verb):
                common.add_argument(
                    *option.flags,
                    dest=option.dest + AFTER,
                    default=argparse.SUPPRESS,
                    help=option.help(verb),
                    **option.options,
                )
        add_global_flags(parser, after_verb=True)
        self._parsers[verb.name] = parser
        return parser

    def __iter__(self) -> Iterator[Verb]:
        return iter(self._verbs.values())

    def get(self, name: str) -> Verb:
        return self._verbs[name]

    def parser(self, name: str) -> Parser:
        return self._parsers[name]


def warn_deprecated(old: str, new: str) -> None:
    """One line on stderr for an old spelling that still works, for one release: what to write instead."""
    logger.warning("imagebuild: warning: %s is deprecated and goes in the next release; use %s", old, new)


def project_of(args: argparse.Namespace) -> Project:
    """The checkout the verb works on: -C DIR exactly, else the nearest one above the working directory."""
    explicit = args.project is not None
    return find_project(Path.cwd(), getattr(args, "pins", None), search_parents=not explicit)
