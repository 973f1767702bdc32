"""Argument types: each value is checked as it is parsed, before any verb contacts the engine or the network.

argparse reports a refused value as ``argument --tag: <why>``, so the message
names the argument; ``main`` prints it on one line with exit 2. Paths are
checked relative to the directory the verb runs in (``-C DIR`` is applied
before the arguments are parsed).
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from imagebuild.inputs.references import image_problem, shown_reference, tag_reference_problem
from imagebuild.inputs.values import control_problem, scan_root_problem, shown

if TYPE_CHECKING:
    from imagebuild.build.compile_cache import CompileCache

T = TypeVar("T")

# docker's network modes for a build: bridge, host, none, default, a user-defined network's
# name, or container:<name|id>.
NETWORK_RE = re.compile(r"(?:container:)?[A-Za-z0-9][A-Za-z0-9_.-]*")


def path_argument(check: Callable[[str], T]) -> Callable[[str], T]:
    """``check`` with any OSError of looking at the path (a name over 255 bytes, a directory that cannot
    be searched, a symlink loop) refused as the argument's error: Path.exists() and is_dir() raise them."""

    @functools.wraps(check)
    def checked(text: str) -> T:
        try:
            return check(text)
        except OSError as e:
            msg = f"{shown(text)}: cannot look at it ({e.strerror or e}); name a path you can reach"
            raise argparse.ArgumentTypeError(msg) from e

    return checked


def _status(path: Path) -> os.stat_result | None:
    """``path``'s status, links followed; None when nothing is there (other OSErrors: ``path_argument``)."""
    try:
        return path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None


def build_arg(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        msg = f"{text!r}: expected NAME=VALUE"
        raise argparse.ArgumentTypeError(msg)
    return name, value


def add_build_arg(p: argparse.ArgumentParser, help_text: str) -> None:
    """--build-arg NAME=VALUE, repeatable: build, plan and verify take the same tunables."""
    p.add_argument(
        "--build-arg", action="append", default=[], type=build_arg, metavar="NAME=VALUE", help=help_text
    )


def image_tag(text: str) -> str:
    problem = tag_reference_problem(text)
    if problem:
        msg = f"{shown(shown_reference(text))}: {problem}; e.g. registry.example.com/ml/kimi-k3:gfx942"
        raise argparse.ArgumentTypeError(msg)
    return text


def image(text: str) -> str:
    """An image to read: its ID, or NAME[:TAG][@DIGEST]."""
    problem = image_problem(text)
    if problem:
        msg = f"{shown(shown_reference(text))}: {problem}; give an image ID or a name `docker images` lists"
        raise argparse.ArgumentTypeError(msg)
    return text


ARCHIVE_SUFFIXES = (".tar", ".json", ".zst", ".gz")


@path_argument
def image_or_archive(text: str) -> str:
    """`imagebuild diff`'s operands: an archive file, or an image in the engine (checked as `image` is)."""
    path = Path(text)
    if path.is_file():
        return text
    if path.is_dir():
        msg = f"{text!r} is a directory; name a docker save or imagebuild export archive, or an image"
        raise argparse.ArgumentTypeError(msg)
    if path.exists():  # a FIFO would block the read for ever, /dev/zero never end it
        msg = f"{text!r} is not a regular file (a FIFO, a device or a socket); name a docker save or imagebuild export archive"
        raise argparse.ArgumentTypeError(msg)
    if text.startswith(("/", "./", "../", "~")) or text.endswith(ARCHIVE_SUFFIXES):
        msg = f"{text!r}: no such file; name an existing archive, or an image `docker images` lists"
        raise argparse.ArgumentTypeError(msg)
    return image(text)


def network_mode(text: str) -> str:
    if not NETWORK_RE.fullmatch(text):
        msg = f"{text!r}: not a network mode: host, bridge, none, a network's name or container:NAME"
        raise argparse.ArgumentTypeError(msg)
    return text


@path_argument
def compile_cache(text: str) -> CompileCache:
    """--compile-cache DIR|URL: a directory (created when missing) or an http(s) ccache storage.

    A refusal names the cache as ``CompileCache.described`` does: never a credential the URL holds.
    """
    from imagebuild.build.compile_cache import CompileCache, compile_cache_problem

    problem = control_problem(text) or compile_cache_problem(text)
    if problem:
        shown = CompileCache(url=text).described if "://" in text else repr(text)
        msg = f"{shown}: {problem}"
        raise argparse.ArgumentTypeError(msg)
    return CompileCache(url=text) if "://" in text else CompileCache(directory=Path(text).resolve())


AHEAD_OFF = "off"


def normalize_ahead(text: str) -> int | None:
    """--normalize-ahead MB|off: a whole number of megabytes (0: after every built step), or off."""
    if text == AHEAD_OFF:
        return None
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        msg = f"{text[:40]!r}: not a size: a whole number of MB (0 to 999999999), or {AHEAD_OFF}"
        raise argparse.ArgumentTypeError(msg)
    return int(text)


def _printable_path(text: str) -> None:
    """A path the verb writes and names in its messages: no control characters (each message is one line)."""
    problem = control_problem(text)
    if problem:
        msg = f"{text!r}: {problem}"
        raise argparse.ArgumentTypeError(msg)


def pins_file(text: str) -> Path:
    """--pins: a pins file's path (what it holds is checked when it is read); never empty, which
    would name the current directory."""
    _printable_path(text)
    if not text:
        msg = "'' is empty; name a pins file, e.g. pins.toml"
        raise argparse.ArgumentTypeError(msg)
    return Path(text)


@path_argument
def checks_file(text: str) -> Path:
    """--checks: a checks file that must exist (what it holds is checked when it is read)."""
    _printable_path(text)
    if not text or not Path(text).is_file():
        msg = f"{text!r} is not a file; name a checks file, e.g. checks.toml"
        raise argparse.ArgumentTypeError(msg)
    return Path(text)


def name(text: str) -> str:
    """A pin's or a locked python package's name as given on the command line: never empty (an empty
    name would select nothing, and the verb would answer a question nobody asked)."""
    _printable_path(text)
    if not text.strip():
        msg = f"{text!r} is empty; name a pin of pins.toml or a locked python package"
        raise argparse.ArgumentTypeError(msg)
    return text


def _writable_dir(text: str, parent: Path) -> None:
    """Create and remove a file in ``parent``: permission bits say nothing of /proc, a read-only
    mount or a full quota, and a build must not find that out after an hour."""
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".imagebuild-probe-"):
            pass
    except OSError as e:
        msg = f"{text}: cannot write in directory {parent} ({e.strerror or e}); choose a directory you can write"
        raise argparse.ArgumentTypeError(msg) from e


@path_argument
def output_file(text: str) -> Path:
    """A file the verb will write: its directory must exist and be writable, and it must be a regular file
    or nothing yet. The write renames a new file over the path, so a device (/dev/null), a FIFO or a
    socket there would be replaced, not written to. A symlink to a regular file is taken (its target
    is checked); the rename replaces the link itself and leaves its target as it was."""
    _printable_path(text)
    if not text:
        msg = "'' is empty; name a file to write"
        raise argparse.ArgumentTypeError(msg)
    path = Path(text)
    status = _status(path)
    if status is not None and stat.S_ISDIR(status.st_mode):
        msg = f"{text!r} is a directory; name a file to write"
        raise argparse.ArgumentTypeError(msg)
    if status is not None and not stat.S_ISREG(status.st_mode):
        msg = f"{text!r} is not a regular file (a device, a FIFO or a socket), which the write would replace; name a file to write"
        raise argparse.ArgumentTypeError(msg)
    parent = path.parent
    if not parent.exists():
        msg = f"{text}: directory {parent} does not exist; create it or write elsewhere"
        raise argparse.ArgumentTypeError(msg)
    if not parent.is_dir():
        msg = f"{text}: {parent} is not a directory; name a file in a directory"
        raise argparse.ArgumentTypeError(msg)
    if not os.access(parent, os.W_OK | os.X_OK):
        msg = f"{text}: directory {parent} is not writable; choose a directory you can write"
        raise argparse.ArgumentTypeError(msg)
    _writable_dir(text, parent)
    return path


@path_argument
def output_dir(text: str) -> str:
    """A directory the verb will write (made if missing), or - for stdout (render: the Dockerfile alone)."""
    _printable_path(text)
    if text != "-" and (not text or (Path(text).exists() and not Path(text).is_dir())):
        msg = (
            f"{text!r} is not a directory; name a directory to write the build context into, or - for stdout"
        )
        raise argparse.ArgumentTypeError(msg)
    return text


def output_file_or_stdout(text: str) -> Path | None:
    """A file the verb will write (checked as ``output_file`` is), or - for stdout (None)."""
    return None if text == "-" else output_file(text)


def output_directory(text: str) -> Path:
    """A directory a verb writes several files into (made if missing, by the verb, once it proceeds);
    - (stdout) cannot hold them; never empty, which would name the working directory."""
    _printable_path(text)
    if not text:
        msg = "'' is empty; name a directory to write into, e.g. . for the working directory"
        raise argparse.ArgumentTypeError(msg)
    if text == "-":
        msg = "'-': this verb writes several files, which stdout cannot hold; name a directory"
        raise argparse.ArgumentTypeError(msg)
    return Path(text)


@path_argument
def project_root(text: str) -> Path:
    """-C DIR: the project's directory, which must exist; never empty (that would be the working directory)."""
    if not text:
        msg = "'' is empty; give the project's directory, e.g. -C ."
        raise argparse.ArgumentTypeError(msg)
    if not Path(text).is_dir():
        msg = f"{text} is not a directory; give the project's directory"
        raise argparse.ArgumentTypeError(msg)
    return Path(text)


@path_argument
def input_file(text: str) -> Path:
    """A file the verb reads (import's manifest, slurm's --archive, --from-record's record or project):
    never empty, which would name the working directory, and a path that can be looked at; whether it is
    there and what it holds is checked when it is read."""
    if not text:
        msg = "'' is empty; name the file to read"
        raise argparse.ArgumentTypeError(msg)
    _status(Path(text))
    return Path(text)


def scan_root(text: str) -> str:
    """verify --scan-root: an absolute path inside the image, plain characters only."""
    problem = scan_root_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


@path_argument
def project_directory(text: str) -> Path:
    """init's DIR: a directory to write a project into (made if missing; what is in it is checked by init)."""
    _printable_path(text)
    if not text:
        msg = "'' is empty; name a directory for the project, e.g. . or my-image"
        raise argparse.ArgumentTypeError(msg)
    if Path(text).exists() and not Path(text).is_dir():
        msg = f"{text!r} is not a directory; name a new or empty directory for the project"
        raise argparse.ArgumentTypeError(msg)
    return Path(text)
