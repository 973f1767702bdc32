"""Layer chain IDs (OCI image spec): how an engine's layer store and ``docker save`` name a stack of layers.

ChainID(n) = sha256(ChainID(n-1) + " " + DiffID(n)). Defined once, in the shipped importer (standard
library only), which computes them on nodes without imagebuild.
"""

from __future__ import annotations

from imagebuild.importer.held_layers import chain_ids

__all__ = ["chain_ids"]
