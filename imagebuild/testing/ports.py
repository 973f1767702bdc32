"""Free loopback ports and the dev tools' paths, for tests that start servers or run linters."""

from __future__ import annotations

import os
import random
import shutil
import socket
import sys
from pathlib import Path


def dev_tool(name: str) -> str:
    """A dev tool (shellcheck, hadolint) installed beside this Python, or on PATH.

    `.venv/bin/python -m pytest` runs without the venv's bin on PATH; the tool is there all the same.
    """
    found = shutil.which(
        name, path=os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))
    )
    if found is None:
        msg = f"{name} is not installed; run `pip install -e '.[dev]'` (scripts/dev-env.sh does)"
        raise RuntimeError(msg)
    return found


# Ports ---------------------------------------------------------------------------------------------

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port() -> int:
    """A loopback port nothing listens on now, for a test to bind or to find refused.

    Not `bind(0)`: that hands out a port from the kernel's ephemeral range, where any outgoing
    connection on this busy machine may take it before the test binds it (seen here: a launcher
    test's barrier port "held by another job"). So: a random free port below that range.
    """
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        port = random.randrange(20000, max(low, 20001))
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    msg = f"no free loopback port in 20000..{low}"
    raise RuntimeError(msg)
