"""What each kind of value may look like, and how a value is quoted where it lands.

Every value that can reach the Dockerfile passes through here twice. When its
file is read (schema.Table), it is checked by its kind: a commit SHA, an image
digest, a URL with an allowed scheme, a PEP 508 project name, an absolute
path, a tunable, ... and control characters are refused in every string, so
no value can start a Dockerfile line of its own. When it is rendered, it is
quoted for the place it lands: a Dockerfile ARG or LABEL value (literal), an
ENV value (a template that may reference ``${NAME}``) or a shell word.

A kind is deliberately narrower than what the consumer would accept: a
tunable may be used unquoted by a stage (``make -j${MAX_JOBS}``), so it holds
no spaces, quotes, ``$`` or glob characters; a path is plain characters only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import parse_qsl, urlsplit

from packaging.version import InvalidVersion, Version

from imagebuild.errors import ConfigError
from imagebuild.inputs import references
from imagebuild.launcher import text as launcher_text
from imagebuild.secrets import CREDENTIAL_QUERY_PARAMS, redact, value_secret_reason

# The characters no value may hold, the length bound and the shown form are the launcher's (the
# lowest package every checker can import), so the Dockerfile, the sbatch script and the launcher in
# the image refuse the same set; the rest of imagebuild imports them from here.
CONTROL_RE = launcher_text.CONTROL_RE
MAX_VALUE_CHARS = launcher_text.MAX_VALUE_CHARS
SHOWN_CHARS = launcher_text.SHOWN_CHARS
control_problem = launcher_text.text_problem  # why a value cannot appear in a generated file, or None
shown = launcher_text.shown  # a value for a one-line message: escaped, cut when long


def escape_controls(text: str) -> str:
    """``text`` with every control character written as an escape, so it prints on one line."""
    return CONTROL_RE.sub(lambda m: repr(m[0])[1:-1], text)


@dataclass(frozen=True)
class Kind:
    """A kind of value: a name for messages and a check that says what is wrong, or None."""

    name: str  # "a 40-hex commit SHA"
    problem: Callable[[str], str | None]
    # What a message may show of a value, after the secret detector's redaction (an image reference's
    # user info, which only the reference grammar tells from an e-mail address).
    shown_as: Callable[[str], str] = str

    def check(self, value: str, where: str, key: str) -> str:
        """``value`` if it is of this kind; else ConfigError naming ``where`` and ``key``."""
        problem = control_problem(value) or self.problem(value)
        if problem:  # redacted before it is cut: a cut could leave a long password without its '@host'
            msg = f"{where}: '{escape_controls(key)}' = {shown(self.shown_as(redact(value)))} {problem}"
            raise ConfigError(msg)
        return value


def pattern_kind(name: str, pattern: str, advice: str = "") -> Kind:
    compiled = re.compile(pattern)

    def problem(value: str) -> str | None:
        if compiled.fullmatch(value):
            return None
        return f"is not {name}{f'; {advice}' if advice else ''}"

    return Kind(name, problem)


def all_of(name: str, *checks: Callable[[str], str | None]) -> Kind:
    def problem(value: str) -> str | None:
        return next((p for check in checks if (p := check(value))), None)

    return Kind(name, problem)


# Identities ------------------------------------------------------------------------------------------

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_RELOCK = "fix it or clear it and run `imagebuild lock`"
COMMIT = pattern_kind("a valid 40-hex commit SHA", COMMIT_RE.pattern, _RELOCK)
DIGEST = pattern_kind("a valid 'sha256:' + 64 hex digest", DIGEST_RE.pattern, _RELOCK)
SHA256 = pattern_kind("a valid 64-hex sha256", SHA256_RE.pattern, _RELOCK)
# What `imagebuild lock` wrote a pin from: a digest of its declared keys, then one of its identity
# (imagebuild.pins.base.Pin.fingerprint_for).
FINGERPRINT_RE = re.compile(r"^[0-9a-f]{12}\.[0-9a-f]{12}$")
FINGERPRINT = pattern_kind(
    "a lock fingerprint (12 hex, '.', 12 hex)", FINGERPRINT_RE.pattern, "clear it and run `imagebuild lock`"
)
# A commit's committer time in UTC, as `imagebuild lock` records it (RFC 3339, whole seconds).
COMMITTED_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
COMMITTED_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def _committed(value: str) -> str | None:
    name = "a valid UTC time like '2026-01-01T00:00:00Z'"
    if not COMMITTED_RE.fullmatch(value):
        return f"is not {name}; {_RELOCK}"
    try:
        datetime.strptime(value, COMMITTED_FORMAT)
    except ValueError:
        return f"is not {name} (no such date or time); {_RELOCK}"
    return None


COMMITTED = Kind("a UTC commit time", _committed)

# Names and versions ------------------------------------------------------------------------------------

# PEP 508's name (a distribution as pip and PyPI name it).
PROJECT_NAME = pattern_kind(
    "a PEP 508 project name", r"(?i:[a-z0-9]|[a-z0-9][a-z0-9._-]*[a-z0-9])", "letters, digits, '.', '_', '-'"
)
PYTHON_VERSION = pattern_kind("MAJOR.MINOR", r"3\.[0-9]{1,2}", "e.g. '3.12'")
TOOLCHAIN_VERSION = pattern_kind("an exact toolchain version", r"[0-9]+\.[0-9]+\.[0-9]+", "e.g. '1.88.0'")
FILE_NAME = pattern_kind(
    "a file name", r"[A-Za-z0-9_+][A-Za-z0-9._+!-]*", "letters, digits and '._+!-', no '/'"
)


def _release_version(value: str) -> str | None:
    # packaging accepts surrounding spaces and 'v1.0'; a pin is written the one way pip prints it.
    try:
        parsed = Version(value)
    except InvalidVersion:
        return "is not a release version; pin an exact one, e.g. '0.2.4'"
    if str(parsed) != value and value.lower() != str(parsed):
        return f"is not written as a release version; write {str(parsed)!r}"
    return None


VERSION = Kind("a release version", _release_version)

# Image names, tags and references: docker's grammar, defined once in imagebuild.inputs.references.


def _image_name(value: str) -> str | None:
    if not references.NAME_RE.fullmatch(value):
        return "is not an image name ([registry/]lowercase/path; put the tag in `tag`, not in `image`)"
    try:
        references.parse_image_name(value)  # an upper-case first component is no registry host
    except ConfigError:
        return "is not an image name ([registry/]lowercase/path; put the tag in `tag`, not in `image`)"
    return None


def _image_reference(value: str) -> str | None:
    problem = references.image_problem(value)
    return f"is not an image reference: {problem}" if problem else None


IMAGE_NAME = Kind("an image name", _image_name)
IMAGE_TAG = pattern_kind(
    "a docker tag", references.TAG_RE.pattern, "letters, digits, '_', '.', '-'; at most 128"
)
IMAGE_REFERENCE = Kind("an image reference", _image_reference, references.shown_reference)  # ID, NAME[:TAG][@DIGEST]
# docker's network modes: a name, or container:NAME.
NETWORK_MODE = pattern_kind(
    "a docker network mode", r"(?:container:)?[A-Za-z0-9][A-Za-z0-9_.-]*", "e.g. host, bridge, none"
)
STAGE_NAME = pattern_kind("a Dockerfile stage name", r"[a-z][a-z0-9_.-]*", "lowercase letters, digits, '_.-'")
# A pins file's table name: it becomes the pin's ARG prefix (flydsl -> FLYDSL_VERSION).
PIN_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
PIN_NAME = pattern_kind("a pin name", PIN_NAME_RE.pattern, "lowercase letters, digits and '_'")
ARCH_NAME = pattern_kind("an arch profile name", r"[a-z][a-z0-9_-]*", "the NAME of stages/arch/NAME.toml")
ENV_NAME = pattern_kind("an UPPER_SNAKE_CASE name", r"[A-Z][A-Z0-9_]*")


def _git_ref(value: str) -> str | None:
    # git check-ref-format's rules, narrowed to what a tag or branch of a real project uses. A
    # leading '-' would read as an option of `git ls-remote`.
    if not re.fullmatch(r"[A-Za-z0-9._/+-]+", value):
        return "is not a git tag or branch name (letters, digits, '._/+-')"
    parts = value.split("/")
    if value.startswith(("-", "/")) or value.endswith(("/", ".", ".lock")) or ".." in value:
        return "is not a valid git ref name (git check-ref-format)"
    if any(not p or p.startswith(".") for p in parts):
        return "is not a valid git ref name (git check-ref-format)"
    return None


GIT_REF = Kind("a git tag or branch", _git_ref)

# Text the build uses unquoted ---------------------------------------------------------------------------

# Tunables and arch values: stages may expand them unquoted (`cd ${BASE_SITE_PACKAGES}`, `-j${MAX_JOBS}`),
# so no spaces, quotes, '$', backslash or glob characters. ';' stays: `gfx90a;gfx942` is an arch list,
# and the shell never runs what an expansion yields.
TUNABLE = pattern_kind(
    "a tunable value",
    r"[A-Za-z0-9_.,:;+=/@%-]*",
    "letters, digits and '_.,:;+=/@%-' (no spaces, quotes or '$')",
)
# Tunables a stage takes as a number of parallel jobs (make -j${MAX_JOBS}, nvcc's threads): an empty
# value would make `make -j` run without a limit, a bad one fail hours into the build.
MAX_PARALLEL_JOBS = 1024


def _job_count(value: str) -> str | None:
    if re.fullmatch(r"[1-9][0-9]{0,3}", value) and int(value) <= MAX_PARALLEL_JOBS:
        return None
    return f"is not a number of parallel jobs: a whole number from 1 to {MAX_PARALLEL_JOBS}"


JOB_COUNT = Kind("a number of parallel jobs", _job_count)
# The tunable of an optional layer (a step's enabled_by): exactly what the step's shell guard compares.
LAYER_SWITCH = pattern_kind("0 or 1", r"[01]", "0 leaves the optional layer out, 1 builds it")
# Tunables whose kind is narrower than TUNABLE, by name (stages/image.toml [args]).
TUNABLE_KINDS = {"MAX_JOBS": JOB_COUNT, "NVCC_THREADS": JOB_COUNT}
_REF = r"\$\{[A-Za-z_][A-Za-z0-9_]*\}"
_PATH_CHARS = r"[A-Za-z0-9._+@,:=-]"


def _path(value: str, *, absolute: bool, refs: bool) -> str | None:
    # A ${NAME} in a path names an ARG that holds an absolute path (a pin's site_packages).
    plain = re.sub(_REF, "/x", value) if refs else value
    if not re.fullmatch(rf"(?:/|{_PATH_CHARS})+", plain):
        return "is not a plain path (letters, digits and '._+@,:=-' between '/')"
    if absolute != plain.startswith("/"):
        return "is not an absolute path" if absolute else "must be a path relative to the build context"
    if any(part in (".", "..") for part in plain.split("/")):
        return "has a '.' or '..' component; write the path it means"
    return None


ABSOLUTE_PATH = Kind("an absolute path", lambda v: _path(v, absolute=True, refs=False))
# Stage paths may name an ARG: ${BASE_SITE_PACKAGES}/aiter.
ABSOLUTE_PATH_TEMPLATE = Kind("an absolute path", lambda v: _path(v, absolute=True, refs=True))


def scan_root_problem(root: str) -> str | None:
    """Why ``root`` cannot be a verify --scan-root (an absolute path inside the image, plain characters), or None."""
    problem = control_problem(root) or ABSOLUTE_PATH.problem(root)
    return f"{shown(root)} {problem}; give a directory inside the image, e.g. /opt" if problem else None
CONTEXT_PATH = Kind("a build-context path", lambda v: _path(v, absolute=False, refs=False))


def _env_template(value: str) -> str | None:
    # Rendered inside double quotes: in a Dockerfile ENV, and inline before a command in a RUN
    # line, where '$(' or a backquote would run. Only ${NAME} references may expand.
    plain = re.sub(_REF, "", value)
    bad = sorted({c for c in plain if c in '"\\`$'})
    if bad:
        return f"has {' '.join(bad)} outside a ${{NAME}} reference (values are rendered in double quotes)"
    return None


ENV_VALUE = Kind("an env value", _env_template)


# Options of pip itself that add a package source: a hash-locked install takes its packages only
# from the lines piped to it (pylock.toml's, or the fetched wheel with its pin's sha256).
PIP_SOURCE_OPTIONS = frozenset(
    {"--requirement", "--editable", "--index-url", "--extra-index-url", "--find-links", "--constraint"}
)


def _hash_locked_install(value: str) -> str | None:
    words = value.split(" ")
    if words[0] != "install" or not all(re.fullmatch(r"--[a-z][a-z0-9-]*", w) for w in words[1:]):
        return "is not 'install' followed only by long pip options without values (e.g. '--force-reinstall'); the packages come from the lock or the fetched wheel"
    sources = sorted(set(words[1:]) & PIP_SOURCE_OPTIONS)
    if sources:
        return f"adds a package source ({', '.join(sources)}); a hash-locked install takes only the lines piped to it"
    return None


# The pip words of a { pip = "install ...", locked = true } or fetched = PIN command.
HASH_LOCKED_INSTALL = Kind("a hash-locked pip install", _hash_locked_install)
TEXT = Kind("text", lambda _v: None)  # only the control-character check


# URLs -----------------------------------------------------------------------------------------------------


def url_kind(name: str, schemes: Collection[str]) -> Kind:
    """A URL of one of ``schemes``: https anywhere; any other scheme only to a loopback host.

    Loopback is the sample world. Credentials never belong in a pin: user info
    and token query parameters are refused (pins are committed, and their URLs
    reach the image history, labels and the SBOM).
    """

    def problem(value: str) -> str | None:
        if not re.fullmatch(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+", value):
            return f"is not {name} (spaces, quotes and backslashes must be %-encoded)"
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018  raises on a bad port
        except ValueError as e:
            return f"is not {name} ({e})"
        if parts.scheme not in schemes or not parts.hostname:
            return f"is not {name} ({' or '.join(sorted(schemes))}://HOST/...)"
        if "@" in parts.netloc:
            return "carries credentials (user info before '@'); pins are public: remove them and use docker's or git's credential helper"
        if parts.scheme != "https" and not references.is_loopback(parts.hostname):
            return f"uses {parts.scheme}:// to a host that is not loopback; real sources use https://"
        params = {k.lower() for k, _ in parse_qsl(parts.query, keep_blank_values=True)}
        tokens = sorted(params & CREDENTIAL_QUERY_PARAMS)
        if tokens:
            return f"carries a credential in its query ({', '.join(tokens)}=...); pins are public: use a URL without it"
        reason = value_secret_reason(value, "it")
        return f"is refused: {reason}" if reason else None

    return Kind(name, problem)


HTTPS_URL = url_kind("an https URL", ("https", "http"))
GIT_URL = url_kind("a git URL", ("https", "http", "git"))


# Quoting ------------------------------------------------------------------------------------------------


def dockerfile_literal(value: str) -> str:
    """A double-quoted Dockerfile word taken literally (ARG and LABEL values): no $ expansion."""
    return '"' + re.sub(r'([\\"$])', r"\\\1", value) + '"'


def quoted_template(value: str) -> str:
    """A double-quoted word in which ${NAME} expands: an ENV value, or an env value before a command."""
    return '"' + re.sub(r'([\\"])', r"\\\1", value) + '"'


def shell_quoted_text(value: str) -> str:
    """``value`` escaped to sit literally inside a double-quoted shell word ("dir/${FILE}")."""
    return re.sub(r'([\\"$`])', r"\\\1", value)


def shell_word(value: str) -> str:
    """One double-quoted shell word, taken literally."""
    return f'"{shell_quoted_text(value)}"'
