"""What a credential looks like: the one detector imagebuild uses everywhere.

Build inputs (ARG names and values, pin URLs), labels, build records, logs and
``imagebuild verify`` (the image's history, config, labels and files) all ask
this module, so a token shape added here is caught everywhere at once.

Patterns are plain ``re`` syntax with a group named ``secret`` around the part
that must never be shown. A token also hides encoded: in a docker ``config.json``
``auth`` (base64 of ``user:token``), a Kubernetes secret, a percent-encoded URL.
So each run of text that may be base64 (either alphabet) or holds a ``%XX``
escape is decoded once and the patterns run over the decoding too; a finding
there covers the whole encoded run, which is what a report hides. The module needs only the standard library: verify
runs this same file with the image's own python to scan the image's files, so
a finding is redacted before anything leaves the container.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import unquote

# Names a user may give a build arg that say it holds a credential.
SECRET_NAME_RE = re.compile(r"TOKEN|SECRET|PASSW(OR)?D|KEY|CREDENTIAL|AUTH", re.IGNORECASE)

# Query parameters that carry a credential in a URL (lowercase): GitLab, OAuth, S3 and GCS
# presigned URLs, Azure SAS.
CREDENTIAL_QUERY_PARAMS = frozenset(
    {
        "token",
        "access_token",
        "private_token",
        "job_token",
        "api_key",
        "apikey",
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
        "x-goog-signature",
        "x-goog-credential",
        "sig",
        "signature",
        "password",
        "client_secret",
    }
)


@dataclass(frozen=True)
class SecretPattern:
    kind: str
    regex: str  # `re` syntax; the group 'secret' is what a report hides


_QUERY = "|".join(sorted(re.escape(p) for p in CREDENTIAL_QUERY_PARAMS))
SECRET_PATTERNS: tuple[SecretPattern, ...] = (
    SecretPattern("GitHub token", r"\b(?P<secret>gh[pousr]_[A-Za-z0-9]{16,})"),
    SecretPattern("GitHub fine-grained token", r"\b(?P<secret>github_pat_[A-Za-z0-9_]{16,})"),
    SecretPattern("GitLab token", r"\b(?P<secret>glpat-[A-Za-z0-9_-]{16,})"),
    SecretPattern("AWS access key", r"\b(?P<secret>(?:AKIA|ASIA)[0-9A-Z]{16})\b"),
    SecretPattern("Slack token", r"\b(?P<secret>xox[abprs]-[A-Za-z0-9-]{10,})"),
    SecretPattern("Hugging Face token", r"\b(?P<secret>hf_[A-Za-z0-9]{30,})"),
    SecretPattern("PyPI token", r"\b(?P<secret>pypi-[A-Za-z0-9_-]{40,})"),
    SecretPattern("GitHub App token in a URL", r"x-access-token:(?P<secret>[^@\s/]+)@"),
    SecretPattern("password in a URL", r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:(?P<secret>[^/\s@]+)@"),
    SecretPattern("token in a URL", r"[A-Za-z][A-Za-z0-9+.-]*://(?P<secret>[A-Za-z0-9_-]{20,})@"),
    SecretPattern("credential in a URL query", rf"[?&](?i:{_QUERY})=(?P<secret>[^&#\s\"'<>]+)"),
    # GH_TOKEN=... as shells, env files and build args write it; `GH_TOKEN: value` (YAML) only with
    # a token-like value, so prose such as "GH_TOKEN: refused" is not one.
    SecretPattern(
        "token variable",
        r"\b(?:GH|GITHUB|GITLAB|HF|HUGGING_FACE_HUB|CI_JOB|NPM|PYPI)_TOKEN[\"']?\s*=\s*[\"']?(?P<secret>[^\s\"']{8,})",
    ),
    SecretPattern(
        "token variable in YAML",
        r"\b(?:GH|GITHUB|GITLAB|HF|HUGGING_FACE_HUB|CI_JOB|NPM|PYPI)_TOKEN[\"']?:\s*[\"']?(?P<secret>[A-Za-z0-9_.-]{16,})",
    ),
)
_COMPILED = tuple((p.kind, re.compile(p.regex)) for p in SECRET_PATTERNS)
CONTEXT_CHARS = 24  # shown before a finding, to say where it is


@dataclass(frozen=True, kw_only=True)
class Finding:
    kind: str
    start: int  # of the secret in the text
    end: int
    shown: str  # the finding, redacted: the text just before it, never the secret


# A run that may be base64 (standard or URL-safe alphabet) long enough to hold a token, and a run
# of URL text with a %XX escape in it. Longer runs are not decoded (a certificate, an embedded blob).
_BASE64_RUN_RE = re.compile(r"[A-Za-z0-9+/_-]{24,}={0,2}")
_PERCENT_RUN_RE = re.compile(r"[^\s\"'<>]*%[0-9A-Fa-f]{2}[^\s\"'<>]*")
MAX_DECODED_RUN = 64 * 1024


def _base64_decoded(run: str) -> str | None:
    """``run`` decoded as base64 (bytes that are no UTF-8 replaced: a token is ASCII), or None."""
    body = run.rstrip("=")
    if len(body) % 4 == 1:
        return None
    padded = body + "=" * (-len(body) % 4)
    altchars = b"-_" if "-" in body or "_" in body else None
    try:
        data = base64.b64decode(padded, altchars=altchars, validate=True)
    except (binascii.Error, ValueError):
        return None
    return data.decode("utf-8", errors="replace")


def _encoded_runs(text: str) -> Iterator[tuple[int, int, str, str]]:
    """(start, end, decoded text, encoding) of every run of ``text`` that decodes to other text."""
    for m in _BASE64_RUN_RE.finditer(text):
        decoded = _base64_decoded(m[0]) if len(m[0]) <= MAX_DECODED_RUN else None
        if decoded is not None:
            yield m.start(), m.end(), decoded, "base64-encoded"
    for m in _PERCENT_RUN_RE.finditer(text):
        unquoted = unquote(m[0]) if len(m[0]) <= MAX_DECODED_RUN else m[0]
        if unquoted != m[0]:
            yield m.start(), m.end(), unquoted, "URL-encoded"


def _plain_spans(text: str) -> dict[tuple[int, int], str]:
    """(start, end) of each secret the patterns match in ``text`` as it is -> its kind."""
    spans: dict[tuple[int, int], str] = {}
    for kind, regex in _COMPILED:
        for m in regex.finditer(text):
            start, end = m.span("secret")
            if not any(s < end and start < e for s, e in spans):
                spans[(start, end)] = kind
    return spans


def _spans(text: str) -> dict[tuple[int, int], str]:
    """(start, end) of each secret -> its kind, plain or encoded; overlapping matches count once."""
    spans = _plain_spans(text)
    for start, end, decoded, encoding in _encoded_runs(text):
        if any(s < end and start < e for s, e in spans):
            continue  # already found as it is
        inner = _plain_spans(decoded)
        if inner:
            spans[(start, end)] = f"{next(iter(inner.values()))}, {encoding}"
    return spans


def _masked(text: str, start: int, end: int, spans: dict[tuple[int, int], str]) -> str:
    """text[start:end] with every secret in it (or cut by it) replaced by '<redacted>'."""
    out, at = [], start
    for s, e in sorted(spans):
        if e <= at or s >= end:
            continue
        out.append(text[at:s] if s > at else "")
        out.append("<redacted>")
        at = e
    if at < end:
        out.append(text[at:end])
    return "".join(c if c.isprintable() else " " for c in "".join(out))


def find_secrets(text: str) -> list[Finding]:
    """Every credential-like string in ``text``, each with a redacted rendering to report."""
    spans = _spans(text)
    return [
        Finding(
            kind=kind,
            start=s,
            end=e,
            shown=f"...{_masked(text, max(0, s - CONTEXT_CHARS), s, spans)}<redacted {e - s} chars>",
        )
        for (s, e), kind in sorted(spans.items())
    ]


def redact(text: str) -> str:
    """``text`` with every secret replaced by '<redacted>' (for logs, records and messages)."""
    spans = _spans(text)
    if not spans:
        return text
    out, at = [], 0
    for s, e in sorted(spans):
        out += [text[at:s], "<redacted>"]
        at = e
    out.append(text[at:])
    return "".join(out)


def secret_reason(name: str, value: str = "") -> str | None:
    """Why ``name=value`` looks like a credential, or None."""
    if SECRET_NAME_RE.search(name):
        return f"the name '{name}' looks like a secret"
    return value_secret_reason(value, f"the value of {name}")


def value_secret_reason(value: str, what: str = "the value") -> str | None:
    """Why ``value`` looks like it holds a credential, or None (for values whose name is not chosen by a user)."""
    findings = find_secrets(value)
    if findings:
        first = findings[0]
        return f"{what} contains a credential-like string ({first.kind}: {first.shown})"
    return None


def secret_value_reason(value: str) -> str | None:
    """Why a value (a label, a record field) looks like a credential, or None; names are not judged."""
    findings = find_secrets(value)
    return (
        f"contains a credential-like string ({findings[0].kind}: {findings[0].shown})" if findings else None
    )
