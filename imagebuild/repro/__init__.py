"""Bit-identical rebuilds: reading saved images, rewriting layers, normalising timestamps."""
