"""``main``: parse the command line, run the verb, exit once.

Only ``main`` prints errors or decides the exit status: a verb returns its
code or raises an ImageBuildError, whose message is printed as one line on
stderr (and, with ``--json``, as ``{"schema_version": 1, "error": ..., "exit_code": ...}``
on stdout, through ``output.write_json`` as every document) and whose ``exit_code`` is the status. Verbs write their result to
stdout and everything else to stderr (imagebuild.log).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from imagebuild import __version__
from imagebuild.cli import arguments as argument_types
from imagebuild.cli.output import closed_stdout_problem, stdout_to_devnull, write_json
from imagebuild.cli.verbs import (
    HelpFormatter,
    Parser,
    UsageError,
    Verb,
    Verbs,
    add_common_options_before_verb,
    add_global_flags,
    exit_code_table,
    merge_common_options,
    merge_global_flags,
)
from imagebuild.errors import ExitCode, ImageBuildError, machine_limit
from imagebuild.inputs.values import escape_controls
from imagebuild.log import logger, setup_logging
from imagebuild.secrets import redact

# Every verb's module (imagebuild.cli.MODULE, whose register adds its verbs), in the order
# `imagebuild --help` lists them; a new verb adds its module and names here.
VERB_MODULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("scaffold", ("init",)),
    ("image", ("render", "plan", "verify")),
    ("lock", ("lock",)),
    ("build", ("build",)),
    ("distribute", ("publish", "export", "import")),
    ("attestations", ("attestations",)),
    ("diff", ("diff",)),
    ("slurm", ("slurm",)),
)
MODULE_OF_VERB = {verb: module for module, verbs in VERB_MODULES for verb in verbs}
HELP_FLAGS = frozenset({"-h", "--help", "--version"})


def build_parser(only: str | None = None) -> tuple[Parser, Verbs]:
    """The parser of every verb, or with ``only`` a verb's name, of the verbs of that verb's module.

    A verb's module imports what its verbs' options need, and some modules a lot (the slurm job's
    model): a command line parsed with its own verb's module alone starts faster (a no-op build by
    ~0.1 s, docs/measured.md), and parses as with every verb (the parsers are the same objects).
    """
    parser = Parser(
        prog="imagebuild",
        description="Reproducible builds of the Kimi-K3 vLLM serving image for AMD MI300X.",
        epilog=f"`imagebuild VERB --help` shows a verb's options and examples.\n\n{exit_code_table()}",
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"imagebuild {__version__}")
    add_global_flags(parser, after_verb=False)
    add_common_options_before_verb(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="VERB", parser_class=Parser)
    verbs = Verbs(sub)
    for module, names in VERB_MODULES:
        if only is None or only in names:
            importlib.import_module(f"imagebuild.cli.{module}").register(verbs)
    return parser, verbs


def registered_verbs() -> list[Verb]:
    return list(build_parser()[1])


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    options = arguments[: arguments.index("--")] if "--" in arguments else arguments
    wants_json = "--json" in options  # so even a usage error answers a machine in JSON
    problem = closed_stdout_problem()
    if problem:
        return _fail(problem, ExitCode.BAD_INPUT, json_too=False)
    try:
        directory = _project_directory(arguments)
    except UsageError as e:
        return _usage_failure(e, wants_json)
    with contextlib.chdir(directory) if directory is not None else contextlib.nullcontext():
        return _main(arguments, wants_json)


def parse_arguments(arguments: Sequence[str]) -> argparse.Namespace:
    """The command line as the verb sees it: one value per global flag, wherever it was given.

    Parsed first with the named verb's module alone; anything that parser refuses, and any help,
    is parsed again with every verb, so a usage error or help text is the one every verb gives.
    """
    verb = named_verb(arguments)
    if verb is not None:
        with contextlib.suppress(UsageError):
            return _parse(build_parser(only=verb), arguments)
    return _parse(build_parser(), arguments)


def named_verb(arguments: Sequence[str]) -> str | None:
    """The verb a command line names: its first word that is not an option or an option's value.

    None when help or the version is asked before it, or the word is no verb: then every verb is
    registered. A wrong guess costs nothing but time: the verb's own parser refuses the command line.
    """
    scan = Parser(prog="imagebuild", add_help=False, allow_abbrev=False)
    add_global_flags(scan, after_verb=False)
    add_common_options_before_verb(scan)
    takes_value = {flag for action in scan._actions if action.nargs != 0 for flag in action.option_strings}
    words = iter(arguments)
    for word in words:
        if word in HELP_FLAGS or word == "--":
            return None
        if not word.startswith("-"):
            return word if word in MODULE_OF_VERB else None
        if word in takes_value:  # "--arch gfx942": the next word is its value ("--arch=gfx942" is one word)
            next(words, None)
    return None


def _parse(built: tuple[Parser, Verbs], arguments: Sequence[str]) -> argparse.Namespace:
    parser, verbs = built
    args, unknown = parser.parse_known_args(arguments)
    if unknown:
        # Named by the verb's own help, which lists what it does accept.
        msg = f"unrecognized arguments: {' '.join(unknown)}"
        raise UsageError(msg, f"imagebuild {args.verb.name}")
    merge_global_flags(args)
    merge_common_options(args, verbs)
    return args


def _main(arguments: list[str], wants_json: bool) -> int:
    try:
        args = parse_arguments(arguments)
    except UsageError as e:
        return _usage_failure(e, wants_json)
    except SystemExit as e:  # --help and --version print and exit 0
        return e.code if isinstance(e.code, int) else 0
    setup_logging(args.verbose, quiet=args.quiet)
    verb: Verb = args.verb
    try:
        return verb.run(args)
    except ImageBuildError as e:
        if args.traceback:
            logger.exception("imagebuild: error")
        return _fail(str(e), e.exit_code, json_too=bool(getattr(args, "json", False)))
    except KeyboardInterrupt:
        return _fail("interrupted", ExitCode.INTERRUPTED, json_too=bool(getattr(args, "json", False)))
    except BrokenPipeError:
        # The reader stopped early (`imagebuild render | head`): not an error worth a traceback.
        stdout_to_devnull()
        return int(ExitCode.PIPE_CLOSED)
    except OSError as e:
        # A full disk or a failing filesystem, in one line naming the file (else the verb); any other
        # OSError that reaches here is a bug, and its traceback says where.
        if not (reason := machine_limit(e, where=f"imagebuild {verb.name}")):
            raise
        if args.traceback:
            logger.exception("imagebuild: error")
        return _fail(reason, ExitCode.FAILED, json_too=bool(getattr(args, "json", False)))


def _project_directory(arguments: list[str]) -> Path | None:
    """-C DIR, wherever it is on the command line: applied before the rest is parsed, so every
    relative path argument is checked where the verb will use it (as git -C and make -C do)."""
    scan = Parser(prog="imagebuild", add_help=False, allow_abbrev=False)
    scan.add_argument("-C", "--project", type=argument_types.project_root, action="append", default=[])
    known, _ = scan.parse_known_args(arguments)  # a refused DIR: UsageError, as Parser.error raises
    if not known.project:
        return None
    directory: Path = known.project[-1]
    return directory


def _usage_failure(error: UsageError, wants_json: bool) -> int:
    message = f"{error}; see `{error.prog} --help`"
    return _fail(message, ExitCode.BAD_INPUT, json_too=wants_json)


def _fail(message: str, code: ExitCode, *, json_too: bool) -> int:
    """Report an error: one line on stderr, and with --json a JSON document on stdout too.

    A value quoted in the message cannot break the line or drive the terminal: control
    characters are escaped (bad input keeps to one line; a build failure's log tail keeps
    its lines) and credentials are redacted.
    """
    if code is ExitCode.BAD_INPUT:
        message = escape_controls(message)
    else:
        message = "\n".join(escape_controls(line) for line in message.split("\n"))
    message = redact(message)
    if code is ExitCode.INTERRUPTED:
        print(f"imagebuild: {message}", file=sys.stderr)
    else:
        print(f"imagebuild: error: {message}", file=sys.stderr)
    if json_too:
        try:
            write_json({"error": message, "exit_code": int(code)})
        except ImageBuildError:
            pass  # stdout itself failed: the line on stderr is all
        except BrokenPipeError:
            stdout_to_devnull()  # the reader is gone; the exit code still says what happened
    return int(code)
