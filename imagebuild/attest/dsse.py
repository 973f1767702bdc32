"""DSSE envelopes (secure-systems-lab/dsse, v1.0.2): an in-toto statement, signed with the user's key.

The signature covers the pre-authentication encoding of the payload type and the payload together,
``PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body``, so a signature made for one
type of payload cannot be passed off as one for another (cosign's CVE-2022-35929 checked the type
beside the signature instead). The envelope is the JSON form every in-toto and Sigstore tool reads:
``{"payloadType", "payload" (base64), "signatures": [{"keyid", "sig" (base64)}]}``.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from imagebuild.attest.keys import SigningKey, VerificationKey
from imagebuild.errors import UnverifiedError

IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"


def pae(payload_type: str, payload: bytes) -> bytes:
    """The bytes a DSSE signature covers (LEN: the decimal byte length, no leading zeros)."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def sign_envelope(payload: bytes, key: SigningKey, *, payload_type: str = IN_TOTO_PAYLOAD_TYPE) -> dict[str, Any]:
    signature = key.sign(pae(payload_type, payload))
    return {
        "payloadType": payload_type,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [{"keyid": key.keyid, "sig": base64.b64encode(signature).decode("ascii")}],
    }


def _b64(value: object, what: str, name: str) -> bytes:
    if not isinstance(value, str):
        msg = f"{what}: {name} is not a base64 string; this is not a DSSE envelope imagebuild or cosign wrote"
        raise UnverifiedError(msg)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        try:  # DSSE allows the URL-safe alphabet too
            return base64.urlsafe_b64decode(value)
        except (binascii.Error, ValueError) as e:
            msg = f"{what}: {name} is not valid base64"
            raise UnverifiedError(msg) from e


def envelope_of(document: object) -> dict[str, Any] | None:
    """The DSSE envelope ``document`` is, or None when it is JSON of another shape (a bare statement)."""
    if isinstance(document, dict) and {"payloadType", "payload"} <= set(document):
        return document
    return None


def verify_envelope(envelope: dict[str, Any], key: VerificationKey, *, what: str) -> bytes:
    """The payload, once one of the envelope's signatures verifies with ``key``; UnverifiedError otherwise."""
    payload_type = envelope.get("payloadType")
    if payload_type != IN_TOTO_PAYLOAD_TYPE:
        msg = f"{what}: payloadType {payload_type!r}, not {IN_TOTO_PAYLOAD_TYPE}: not an in-toto attestation"
        raise UnverifiedError(msg)
    payload = _b64(envelope.get("payload"), what, "payload")
    signatures = envelope.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        msg = f"{what}: the envelope carries no signature; sign it with --sign-key on build, export or publish"
        raise UnverifiedError(msg)
    signed = pae(payload_type, payload)
    for number, entry in enumerate(signatures, 1):
        if not isinstance(entry, dict):
            continue
        # keyid is a hint, not authenticated (DSSE): every signature is tried against the key.
        if key.verifies(_b64(entry.get("sig"), what, f"signature {number}"), signed):
            return payload
    ids = sorted({str(e.get("keyid") or "none") for e in signatures if isinstance(e, dict)})
    msg = (
        f"{what}: no signature verifies with {key.source} (key id {key.keyid[:16]}; the envelope's: "
        f"{', '.join(i[:16] for i in ids)}): signed with another key, or changed after it was signed"
    )
    raise UnverifiedError(msg)
