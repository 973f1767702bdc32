"""Command line: parse arguments into options, call the core, exit once.

``app.main`` is the entry point; each verb lives in a module that registers it
(``verbs.Verb``), which gives it the flags, ``--json`` handling and help every
verb shares.
"""

from imagebuild.cli.app import main

__all__ = ["main"]
