"""Reading a JSON file the user names (a record, a manifest, an envelope): whatever is wrong is one line.

Such a file is anyone's: it may be missing, unreadable, a FIFO (a read would block for ever), not UTF-8,
not JSON, or JSON nested deeper than the parser's recursion allows (``[[[...]]]``: RecursionError, not
a ValueError). Each is bad input (ConfigError, exit 2) naming the file and what to do.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from imagebuild.errors import ConfigError


def read_json_file(path: Path, *, where: str, hint: str, missing: str = "") -> Any:
    """The document in ``path``. ``where`` starts each message (the file, or the option that named it),
    ``hint`` ends it (what to give instead); ``missing``, when given, is the whole message's tail for a
    file that is not there."""
    try:
        if stat.S_ISREG(path.stat().st_mode):  # a FIFO would block the read for ever
            return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        msg = f"{where}: {missing or f'no such file; {hint}'}"
        raise ConfigError(msg) from e
    except (OSError, ValueError, RecursionError) as e:
        msg = f"{where}: {_problem(e)}; {hint}"
        raise ConfigError(msg) from e
    msg = f"{where}: not a regular file; {hint}"
    raise ConfigError(msg)


def _problem(error: Exception) -> str:
    if isinstance(error, UnicodeDecodeError):  # a ValueError, as JSONDecodeError is
        return f"not UTF-8 text (byte {error.start})"
    if isinstance(error, RecursionError):
        return "JSON nested too deeply to read"
    if isinstance(error, OSError):  # unreadable, a name too long, a file where a directory should be
        return f"cannot read it ({error.strerror or error})"
    return f"not valid JSON ({error})"
