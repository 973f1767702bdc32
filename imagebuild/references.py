"""docker's image reference grammar (distribution/reference), defined once.

``[HOST[:PORT]/]COMPONENT[/COMPONENT...][:TAG][@DIGEST]``: the host may hold
upper case, the path components may not; a tag is up to 128 word characters,
dots and dashes, not starting with a dot or dash.
"""

from __future__ import annotations

import re

COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
NAME_RE = re.compile(rf"(?:{HOST}/)?{COMPONENT}(?:/{COMPONENT})*")
TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
MAX_NAME_CHARS = 255  # docker refuses longer repository names


def tag_reference_problem(text: str) -> str | None:
    """Why ``text`` cannot name an image to tag (``NAME[:TAG]``, no digest), or None."""
    if "@" in text:
        return "a digest names an image, it cannot be tagged; give NAME[:TAG]"
    name, tag = text, None
    last = text.rsplit("/", 1)[-1]
    if ":" in last:  # a colon after the last slash starts the tag (one before it is a port)
        name, _, tag = text.rpartition(":")
    if not NAME_RE.fullmatch(name):
        return (
            "not a valid image name: the path after the registry is lowercase letters, digits and "
            "'.', '_', '__' or '-' between them, components separated by '/'"
        )
    if len(name) > MAX_NAME_CHARS:
        return f"the name is {len(name)} characters long (at most {MAX_NAME_CHARS})"
    if tag is not None and not TAG_RE.fullmatch(tag):
        return f"tag {tag!r} is not a docker tag: 1-128 letters, digits, '_', '.' or '-', not starting with '.' or '-'"
    return None


IMAGE_ID_RE = re.compile(r"(?:sha256:)?[0-9a-f]{12,64}")
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")


def image_problem(text: str) -> str | None:
    """Why ``text`` names no image (an image ID, or ``NAME[:TAG][@sha256:DIGEST]``), or None."""
    if IMAGE_ID_RE.fullmatch(text):
        return None
    name, at, digest = text.partition("@")
    if at and not DIGEST_RE.fullmatch(digest):
        return f"digest {digest!r} is not 'sha256:' and 64 hex digits"
    return tag_reference_problem(name)
