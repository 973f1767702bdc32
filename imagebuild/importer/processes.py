"""This machine's processes as /proc shows them: by name, their command line, parent and listening sockets.

Read, never trusted further than they can be: a process may end between two reads, and another
user's are not ours to read (each reader then gives None or nothing). Zipapp rules: the standard
library, Python 3.8.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

PROC = Path("/proc")
LISTENING = 1 << 16  # /proc/net/unix's flag for a socket that accepts connections (__SO_ACCEPTCON)


def processes_named(name: str, proc: Path = PROC) -> Iterator[Path]:
    """The /proc directory of each process of this machine called ``name`` (lowest pid first)."""
    try:
        pids = sorted(int(entry.name) for entry in proc.iterdir() if entry.name.isdigit())
    except OSError:
        return
    for pid in pids:
        try:
            if (proc / str(pid) / "comm").read_text().strip() == name:
                yield proc / str(pid)
        except OSError:  # it ended
            continue


def command_line(process: Path) -> list[str] | None:
    try:
        argv = (process / "cmdline").read_bytes().split(b"\0")
    except OSError:  # it ended, or is not ours to read
        return None
    return [arg.decode(errors="replace") for arg in argv if arg]


def go_flags(argv: list[str], names: tuple[str, ...]) -> dict[str, str]:
    """Each of ``names`` (given as ``--name``) from a Go program's command line: ``--name=value`` or
    ``--name value``, with one dash as well."""
    found = {}
    for i, arg in enumerate(argv[1:], start=1):
        name, equals, value = arg.partition("=")
        name = "--" + name.lstrip("-")
        if name in names:
            found[name] = value if equals else (argv[i + 1] if i + 1 < len(argv) else "")
    return found


def parent_pid(process: Path) -> int | None:
    try:
        stat = (process / "stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after the name, which may hold spaces and parentheses
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def open_files(process: Path) -> list[str] | None:
    """Where each of the process's file descriptors points (``socket:[INODE]`` for a socket)."""
    try:
        descriptors = list((process / "fd").iterdir())
    except OSError:  # it ended, or is not ours to read
        return None
    targets = []
    for descriptor in descriptors:
        try:
            targets.append(os.readlink(descriptor))
        except OSError:
            continue
    return targets


def listening_paths(process: Path) -> set[str]:
    """The paths of the unix sockets the process accepts connections on."""
    inodes = {target[8:-1] for target in open_files(process) or () if target.startswith("socket:[")}
    try:
        table = (process / "net" / "unix").read_text().splitlines()[1:]
    except OSError:
        return set()
    paths = set()
    for row in table:  # Num RefCount Protocol Flags Type St Inode Path
        fields = row.split(None, 7)
        if len(fields) == 8 and fields[6] in inodes and int(fields[3], 16) & LISTENING:
            paths.add(fields[7])
    return paths
