"""Layer chain IDs (OCI image spec): how an engine's layer store and ``docker save`` name a stack of layers."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def chain_ids(diff_ids: Sequence[str]) -> list[str]:
    """The OCI chain ID of each layer: ChainID(n) = sha256(ChainID(n-1) + " " + DiffID(n))."""
    chains: list[str] = []
    for diff_id in diff_ids:
        chains.append(
            diff_id
            if not chains
            else "sha256:" + hashlib.sha256(f"{chains[-1]} {diff_id}".encode()).hexdigest()
        )
    return chains
