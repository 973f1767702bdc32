"""Scaffolding: a new project written from an image definition imagebuild ships.

new_project    ``imagebuild init``: the shipped definitions, the plan (what it writes, what it would
               overwrite) and the writing of it
definitions/   the shipped definitions, package data; ``kimi-k3-gfx942/`` links to this repository's own
               stages/, constraints/, pins.toml and pylock.toml, so the wheel ships copies of the very
               files the checkout renders docker/gfx942/ from (one definition, not two)

May import: errors, util, inputs, project. Read by the CLI only.
"""
