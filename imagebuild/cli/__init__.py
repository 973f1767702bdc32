"""Command line: parse arguments into options, call the core, exit once.

app         ``main``, the entry point: parses, runs the verb, reports an error once (the only exit)
verbs       how a verb registers: the global flags and common options every verb shares, help, epilog
arguments   argument types, each value checked as it is parsed (before any engine or network)
output      the one JSON writer: every verb's document, success and failure, with schema_version
scaffold    init
image       render, plan, verify
lock        lock
build       build
distribute  publish, export, import
attestations  attestations verify; the signing flags (--sign-key) build, export and publish share
diff        diff
slurm       slurm

One grammar for every verb (docs/commands.md, "Command-line grammar"; tests/unit/test_cli_contract.py).
May import: everything in imagebuild; nothing imports it.
"""

from imagebuild.cli.app import main

__all__ = ["main"]
