"""Signing flags for build, export and publish, and `imagebuild attestations verify` on the command line.

The key is read when the arguments are checked, before the engine is asked: a missing, unreadable,
foreign or still-encrypted key is one line, exit 2, and nothing is built, pushed or written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from imagebuild.cli.output import write_json
from imagebuild.cli.verbs import Verb, Verbs
from imagebuild.errors import ExitCode

if TYPE_CHECKING:
    from imagebuild.attest.keys import SigningKey


def add_signing_flags(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--sign-key",
        type=Path,
        metavar="PEM",
        help=f"sign {what} with this ed25519 or ECDSA P-256 private key: a DSSE envelope (.dsse.json) beside each",
    )
    p.add_argument(
        "--sign-key-passphrase-env",
        metavar="NAME",
        help="the environment variable holding an encrypted --sign-key's passphrase (never a flag value)",
    )


def signing_key_of(args: argparse.Namespace) -> SigningKey | None:
    """The --sign-key, read and checked now; None without one."""
    from imagebuild.attest.keys import load_signing_key
    from imagebuild.errors import ConfigError

    if args.sign_key is None:
        if args.sign_key_passphrase_env is not None:
            msg = "--sign-key-passphrase-env names the passphrase of a --sign-key: give --sign-key PEM too"
            raise ConfigError(msg)
        return None
    return load_signing_key(args.sign_key, passphrase_env=args.sign_key_passphrase_env)


def cmd_attestations(args: argparse.Namespace) -> int:
    from imagebuild.attest.keys import load_verification_key
    from imagebuild.attest.verify import check_image_digest, verify_attestation
    from imagebuild.errors import ConfigError
    from imagebuild.inputs.values import shown
    from imagebuild.log import logger

    if args.action != "verify":
        msg = f"attestations {shown(args.action)}: the action is verify (imagebuild attestations verify FILE --key PUB)"
        raise ConfigError(msg)
    image = check_image_digest(args.image) if args.image is not None else None
    key = load_verification_key(args.key)
    verified = verify_attestation(args.file, key, image=image)
    subjects = ", ".join(f"{name}@{digest[:19]}" for name, digest in verified.subjects)
    logger.info(
        "%s: signed by key %s; %s about %s", args.file, key.keyid[:16], verified.predicate_type, subjects
    )
    if args.json:
        write_json(
            {
                "file": str(verified.path),
                "verified": True,
                "predicate_type": verified.predicate_type,
                "subjects": [{"name": name, "digest": digest} for name, digest in verified.subjects],
                "image": verified.image or None,
                "keyid": verified.keyid,
            }
        )
    else:
        sys.stdout.write(f"{verified.image or verified.subjects[0][1]}\n")
    return 0


def register(verbs: Verbs) -> None:
    p = verbs.add(
        Verb(
            name="attestations",
            summary="check a signed attestation: its signature with a public key, and the image it names",
            run=cmd_attestations,
            examples=(
                "imagebuild attestations verify build/gfx942-4bd87b8cd925.provenance.dsse.json --key imagebuild.pub",
                "imagebuild attestations verify /shared/images/kimi-k3-4bd87b8cd925.tar.zst.export.dsse.jsonl "
                "--key imagebuild.pub --image sha256:4bd87b8cd925...",
            ),
            exit_codes=(ExitCode.UNVERIFIED,),
            json="the verified statement's predicate type, subjects, image and key id",
            checkout=False,  # an envelope and a key; nothing of the checkout is read
            notes=(
                "verify: the file must be a DSSE envelope (payloadType application/vnd.in-toto+json) one of "
                "whose signatures verifies with --key over its PAE, holding an in-toto Statement v1; with "
                "--image, a subject (or a distribution statement's image) must be that identity or digest. "
                "Prints the image identity the statement is about."
            ),
        )
    )
    p.add_argument("action", metavar="verify", help="what to do with the attestation: verify")
    p.add_argument("file", type=Path, help="the .dsse.json (or .dsse.jsonl) envelope build, export or publish wrote")
    p.add_argument("--key", type=Path, required=True, metavar="PUB", help="the signer's public key (PEM)")
    p.add_argument(
        "--image", metavar="sha256:...", help="the image's identity or manifest digest the statement must name"
    )
