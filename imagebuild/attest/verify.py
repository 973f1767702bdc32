"""`imagebuild attestations verify`: is this envelope signed by that key, and about this image?

Three things are checked, in order, each failure one line with exit 11 (``UnverifiedError``): the
file is a DSSE envelope (a bare statement or SBOM is unsigned), one of its signatures verifies with
the public key over the PAE of its payload, and the payload is an in-toto Statement v1. With
``--image``, the image must be one the statement names: a subject's digest (the identity, the
manifest digest, or for a distribution statement what was produced) or, for a distribution
statement, the image identity or manifest digest its predicate names.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.attest.dsse import envelope_of, verify_envelope
from imagebuild.attest.keys import VerificationKey
from imagebuild.attest.statement import DISTRIBUTION_PREDICATE, STATEMENT_TYPE, hex_of
from imagebuild.errors import ConfigError, UnverifiedError
from imagebuild.inputs.values import DIGEST_RE, shown
from imagebuild.util.json_file import read_json_file


@dataclass(frozen=True, kw_only=True)
class VerifiedStatement:
    path: Path
    predicate_type: str
    subjects: tuple[tuple[str, str], ...]  # (name, sha256:...) of each subject
    image: str  # the identity the statement is about ("" when it names none)
    keyid: str


def check_image_digest(text: str) -> str:
    if not DIGEST_RE.fullmatch(text):
        msg = f"--image {shown(text)}: give the image's identity or manifest digest as sha256: and 64 hex digits"
        raise ConfigError(msg)
    return text


def _unsigned(document: Any, what: str) -> UnverifiedError:
    if isinstance(document, dict) and document.get("bomFormat") == "CycloneDX":
        kind = "an unsigned CycloneDX SBOM"
    elif isinstance(document, dict) and document.get("_type") == STATEMENT_TYPE:
        kind = "an unsigned in-toto statement"
    else:
        kind = "not a DSSE envelope"
    return UnverifiedError(
        f"{what}: {kind}; verify the .dsse.json beside it, which build, export or publish write with --sign-key"
    )


def _digests(entries: Any) -> list[tuple[str, str]]:
    found = []
    for entry in entries if isinstance(entries, list) else []:
        digest = entry.get("digest") if isinstance(entry, dict) else None
        if isinstance(digest, dict) and isinstance(digest.get("sha256"), str):
            found.append((str(entry.get("name", "")), "sha256:" + digest["sha256"]))
    return found


def verify_attestation(
    path: Path, key: VerificationKey, *, image: str | None = None, any_of: Collection[str] = ()
) -> VerifiedStatement:
    """Check the envelope at ``path``; with ``image`` (or ``any_of``: an image's manifest digest and its
    identity, as a registry names it), the statement must name it (one of them)."""
    what = str(path)
    # A file that cannot be read as JSON is bad input (exit 2), not an envelope that fails to verify.
    document = read_json_file(
        path, where=shown(what), hint="give the .dsse.json a signed build, export or publish wrote"
    )
    envelope = envelope_of(document)
    if envelope is None:
        raise _unsigned(document, what)
    payload = verify_envelope(envelope, key, what=what)
    try:
        statement = json.loads(payload)
    except (ValueError, RecursionError) as e:
        msg = f"{what}: the signed payload is not JSON"
        raise UnverifiedError(msg) from e
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        msg = f"{what}: the signed payload is not an in-toto Statement v1 ({STATEMENT_TYPE})"
        raise UnverifiedError(msg)
    subjects = _digests(statement.get("subject"))
    if not subjects:
        msg = f"{what}: the statement names no subject with a sha256 digest"
        raise UnverifiedError(msg)
    predicate_type = str(statement.get("predicateType", ""))
    named = {digest for _, digest in subjects}
    about = subjects[0][1]
    if predicate_type == DISTRIBUTION_PREDICATE:
        described = (statement.get("predicate") or {}).get("image") or {}
        about = str(described.get("identity", ""))
        named |= {str(described[k]) for k in ("identity", "manifestDigest") if described.get(k)}
    wanted = {image, *any_of} - {None}
    if wanted and not wanted & named:
        shown_names = ", ".join(f"{n or '?'}@sha256:{hex_of(d)[:12]}" for n, d in subjects)
        msg = (
            f"{what}: the statement is about another image ({shown_names}; image {about[:19] or 'not named'}), "
            f"not {' or '.join(sorted(w[:19] for w in wanted if w))}: it does not attest this image"
        )
        raise UnverifiedError(msg)
    return VerifiedStatement(
        path=path, predicate_type=predicate_type, subjects=tuple(subjects), image=about, keyid=key.keyid
    )
