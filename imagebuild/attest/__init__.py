"""Attestations: what an SBOM, a provenance or a distribution statement is about, signed and checked.

statement       in-toto Statement v1: subjects naming the image identity, distribution statements,
                writing a document (and its signed envelope) beside an output, mode 0644
dsse            DSSE envelopes: PAE, signing, verifying
keys            the user's ed25519 / ECDSA P-256 PEM keys, read by `cryptography`; bad keys are exit 2
verify          `imagebuild attestations verify`: the signature, then the subject
image_contents  what a built image holds, read from its layers top-down with whiteouts: dpkg status,
                os-release, every site-packages' distributions

Used by build (SBOM, provenance), distribute (export's and publish's statements) and the CLI.
May import: engine, inputs, util and the packages below them; nothing that builds or distributes.
"""
