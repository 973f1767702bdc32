"""The checks every value of an sbatch job passes by its kind: one line naming the option, or the value.

Control characters are refused everywhere (a newline would end a shell line); names, paths, ports and
image references are held to what their place in the script allows.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from imagebuild.errors import ConfigError
from imagebuild.inputs.references import shown_reference, userinfo_problem
from imagebuild.inputs.values import control_problem, shown
from imagebuild.pins import DIGEST_RE
from imagebuild.secrets import redact

# A registry reference pinned by digest: [host[:port]/]path@sha256:<64 hex> (docker's grammar).
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_BY_DIGEST_RE = re.compile(
    rf"^(?:(?P<host>[A-Za-z0-9.-]+(?::[0-9]+)?)/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)@(?P<digest>sha256:[0-9a-f]{{64}})$"
)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# A docker bind spec is SOURCE:TARGET[:OPTIONS]: a ':' or ',' in a path would change its meaning.
MOUNT_UNSAFE = (":", ",")


def bad_value(option: str, value: object, why: str) -> str:
    """The one-line message for a bad value: the option, the value as given, what is expected.
    Redacted before it is cut: a cut could leave a long password without the '@host' that marks it."""
    return f"{option} {shown(redact(value) if isinstance(value, str) else value)}: {why}"


def check_text(option: str, value: str) -> str:
    """Any text that reaches the script: no control characters (a newline would end a shell line, a
    U+202E would make the script read differently than it runs), no value longer than any needs."""
    problem = control_problem(value)
    if problem:
        raise ConfigError(bad_value(option, value, problem))
    return value


def check_name(option: str, value: str) -> str:
    check_text(option, value)
    if not NAME_RE.match(value):
        raise ConfigError(bad_value(option, value, "expected a name of letters, digits, '.', '_' and '-'"))
    return value


def check_path(option: str, value: str, *, mounted: bool = False) -> str:
    check_text(option, value)
    if not PurePosixPath(value).is_absolute():
        raise ConfigError(bad_value(option, value, "expected an absolute path, as the nodes see it"))
    if mounted and any(char in value for char in MOUNT_UNSAFE):
        raise ConfigError(
            bad_value(
                option,
                value,
                "a ':' or ',' would split docker's mount specification; use a path without them",
            )
        )
    return value


def check_port(option: str, value: int) -> int:
    if not 1 <= value <= 65535:
        raise ConfigError(bad_value(option, value, "expected a port number from 1 to 65535"))
    return value


def check_positive(option: str, value: int) -> int:
    if value < 1:
        raise ConfigError(bad_value(option, value, "expected a whole number of 1 or more"))
    return value


def check_image(value: str) -> str:
    check_text("--image", value)
    problem = userinfo_problem(value)
    if problem:
        raise ConfigError(bad_value("--image", shown_reference(value), problem))
    if not IMAGE_BY_DIGEST_RE.match(value):
        why = (
            "expected REPOSITORY@sha256:<64 hex digits>, the reference `imagebuild publish` prints: "
            "every node must pull the same image, which a tag does not promise"
        )
        raise ConfigError(bad_value("--image", value, why))
    return value


def check_image_id(where: str, value: str) -> str:
    check_text(where, value)
    if not DIGEST_RE.match(value):
        raise ConfigError(bad_value(where, value, "expected an image ID sha256:<64 hex digits>"))
    return value
