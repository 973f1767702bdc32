"""Signing flags for build, export and publish; `imagebuild attestations` (REF in a registry, or verify FILE).

The key is read when the arguments are checked, before the engine is asked: a missing, unreadable,
foreign or still-encrypted key is one line, exit 2, and nothing is built, pushed or written.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from imagebuild.cli import arguments
from imagebuild.cli.output import write_json, write_text
from imagebuild.cli.verbs import Verb, Verbs
from imagebuild.errors import ExitCode

if TYPE_CHECKING:
    from imagebuild.attest.keys import SigningKey
    from imagebuild.attest.verify import VerifiedStatement
    from imagebuild.distribute.attached import Downloaded


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
    from imagebuild.errors import ConfigError

    if args.sign_key is None:
        if args.sign_key_passphrase_env is not None:
            msg = "--sign-key-passphrase-env names the passphrase of a --sign-key: give --sign-key PEM too"
            raise ConfigError(msg)
        return None
    from imagebuild.attest.keys import load_signing_key  # cryptography: only when a key is given

    return load_signing_key(args.sign_key, passphrase_env=args.sign_key_passphrase_env)


def cmd_attestations(args: argparse.Namespace) -> int:
    from imagebuild.errors import ConfigError

    if args.target == "verify":
        if args.file is None:
            msg = "attestations verify: give the envelope: imagebuild attestations verify FILE --key PUB"
            raise ConfigError(msg)
        if args.key is None or args.verify or args.download is not None:
            msg = "attestations verify FILE: give --key PUB (--verify and --download are for a registry REF)"
            raise ConfigError(msg)
        return _verify_file(args)
    if args.file is not None:
        msg = f"attestations {args.target}: one REF only (FILE goes after the verify action)"
        raise ConfigError(msg)
    if args.image is not None:
        msg = "--image: for a REF the image is the one REF names; --image is for `attestations verify FILE`"
        raise ConfigError(msg)
    if args.verify != (args.key is not None):
        msg = "--verify and --key PUB go together: --verify checks the attached envelopes with the public key"
        raise ConfigError(msg)
    return _remote(args)


def _verify_file(args: argparse.Namespace) -> int:
    from imagebuild.attest.keys import load_verification_key
    from imagebuild.attest.verify import check_image_digest, verify_attestation
    from imagebuild.log import logger

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
        write_text(f"{verified.image or verified.subjects[0][1]}\n")
    return 0


def _remote(args: argparse.Namespace) -> int:
    """`attestations REF`: list the attached documents; --download DIR, --verify --key PUB."""
    import tempfile

    from imagebuild.attest.keys import load_verification_key
    from imagebuild.distribute.archive_files import check_output_dir
    from imagebuild.distribute.attached import (
        download_referrers,
        list_referrers,
        parse_reference,
        verify_downloaded,
    )
    from imagebuild.log import logger

    reference = parse_reference(args.target)
    key = load_verification_key(args.key) if args.verify else None  # bad key: exit 2 before the registry
    if args.download is not None:  # a file, or a directory that cannot be made: exit 2 before the registry
        check_output_dir(args.download, "--download")
    referrers = list_referrers(reference)
    logger.info(
        "%s@%s: %d attached documents, listed by %s",
        referrers.repository, referrers.digest, len(referrers.entries), referrers.listed_by,
    )  # fmt: skip
    downloaded: tuple[Downloaded, ...] = ()
    verified: tuple[VerifiedStatement, ...] = ()
    if args.download is not None or key is not None:
        with tempfile.TemporaryDirectory(prefix="imagebuild-attestations-") as scratch:
            directory = args.download if args.download is not None else Path(scratch)
            downloaded = download_referrers(referrers, directory)
            for d in downloaded:
                where = d.path if args.download is not None else d.path.name
                logger.info("downloaded %s (%d bytes, %s)", where, d.size, d.sha256)
            if key is not None:
                verified = verify_downloaded(downloaded, referrers, key, report=logger.info)
                for v in verified:
                    logger.info("%s: signed by key %s; %s", v.path.name, key.keyid[:16], v.predicate_type)
    if args.json:
        write_json(
            {
                "repository": referrers.repository,
                "digest": referrers.digest,
                "image": referrers.config_digest or None,
                "listed_by": referrers.listed_by,
                "referrers": [entry.to_json() for entry in referrers.entries],
                "downloaded": [
                    {"path": str(d.path), "sha256": d.sha256, "size": d.size, "artifact_type": d.artifact_type}
                    for d in downloaded
                ]
                if args.download is not None
                else None,
                "verified": [v.path.name for v in verified] if key is not None else None,
            }
        )
        return 0
    if args.download is not None:
        write_text("".join(f"{d.sha256}  {d.path}\n" for d in downloaded))
    elif key is None:
        write_text(
            "".join(f"{e.digest}\t{e.artifact_type or e.media_type}\t{e.size}\t{e.title}\n" for e in referrers.entries)
        )
    if key is not None:
        write_text(f"{referrers.config_digest or referrers.digest}\n")
    return 0


def register(verbs: Verbs) -> None:
    p = verbs.add(
        Verb(
            name="attestations",
            summary="list, download and check an image's attestations in a registry; check a signed one",
            run=cmd_attestations,
            examples=(
                "imagebuild attestations 127.0.0.1:55000/ml/kimi-k3@sha256:4bd87b8cd925...",
                "imagebuild attestations registry.example.com/ml/kimi-k3:gfx942-4bd87b8cd925 --download att/",
                "imagebuild attestations registry.example.com/ml/kimi-k3@sha256:... --verify --key imagebuild.pub",
                "imagebuild attestations verify build/gfx942-4bd87b8cd925.provenance.dsse.json --key imagebuild.pub",
                "imagebuild attestations verify /shared/images/kimi-k3-4bd87b8cd925.tar.zst.export.dsse.jsonl "
                "--key imagebuild.pub --image sha256:4bd87b8cd925...",
            ),
            exit_codes=(ExitCode.REGISTRY, ExitCode.UNVERIFIED),
            json="REF: the referrers (and what was downloaded or verified); verify: the statement's "
            "predicate type, subjects, image and key id",
            checkout=False,  # an envelope and a key, or a registry; nothing of the checkout is read
            notes=(
                "REF (HOST[:PORT]/REPO@sha256:... or :TAG): the documents publish attached to the image, "
                "asked of the registry's referrers API, else read from the index tagged sha256-<hex> (the "
                "referrers tag schema); one line each on stdout: digest, artifact type, size, file name. "
                "--download DIR fetches each artifact whose subject is the image and its document by "
                "digest into DIR; --verify --key PUB checks every attached DSSE envelope as verify does, "
                "against the image's manifest digest or identity (none signed: exit 11). "
                "verify FILE: the file must be a DSSE envelope (payloadType application/vnd.in-toto+json) "
                "one of whose signatures verifies with --key over its PAE, holding an in-toto Statement v1; "
                "with --image, a subject (or a distribution statement's image) must be that identity or "
                "digest. Prints the image identity the statement is about."
            ),
        )
    )
    p.add_argument(
        "target", metavar="REF|verify", help="an image in a registry (HOST[:PORT]/REPO@sha256:... or :TAG), or verify"
    )
    p.add_argument(
        "file", type=Path, nargs="?", help="with verify: the .dsse.json (or .dsse.jsonl) build, export or publish wrote"
    )
    p.add_argument("--key", type=Path, metavar="PUB", help="the signer's public key (PEM)")
    p.add_argument("--verify", action="store_true", help="with REF: check every attached envelope with --key")
    p.add_argument(
        "--download",
        type=arguments.output_directory,
        metavar="DIR",
        help="with REF: write the attached documents into DIR (made when missing)",
    )
    p.add_argument(
        "--image", metavar="sha256:...", help="with verify: the image's identity or manifest digest the statement must name"
    )
