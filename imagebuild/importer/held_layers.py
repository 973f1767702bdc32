"""Which of an archive's layer files need not be sent: the layers the engine already holds.

A graph-driver engine's ``docker load`` looks each layer up by its chain ID (the layer and every one
below it) before it opens the layer's file, and never opens the file of one it holds; the
normalised image's load relies on the same. So a node that already holds the base (or an earlier
build on the same base) need not be sent those bytes: the importer reads and hashes them (the
archive's sha256 covers every byte) but leaves their files out of what the engine gets
(``tar_filter``). The engine says which chains it holds through its images: every image's layers,
and so every prefix of them (``GET /images/json``, then each image's ``RootFS.Layers``).

Only on graph-driver engines: the containerd image store finds a layer by its blob, which another
engine's archive may name under another digest (compressed otherwise), and Podman refuses a legacy
archive without every layer's file. The image loaded is checked against the manifest as always, so
a file left out wrongly fails the load; it cannot load another image.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:  # the engine interface imports this module; a build needs no manifest
    from .manifest import Manifest


def chain_ids(diff_ids: Sequence[str]) -> list[str]:
    """The chain ID of each layer: the first its diffID, then sha256 of "parent's chain ID diffID"."""
    chains: list[str] = []
    for diff_id in diff_ids:
        chains.append(diff_id if not chains else "sha256:" + hashlib.sha256(f"{chains[-1]} {diff_id}".encode()).hexdigest())
    return chains


def chains_of(images_layers: Iterable[Sequence[str]]) -> frozenset[str]:
    """Every chain ID the images whose layers (diffIDs, lowest first) these are hold."""
    return frozenset(chain for layers in images_layers for chain in chain_ids(layers))


def files_to_skip(manifest: Manifest, held: frozenset[str]) -> frozenset[str]:
    """The archive's layer files whose layers' chains the engine holds (``held``); a file that also
    holds a layer the engine lacks is sent."""
    if not manifest.layers or not held:
        return frozenset()
    chains = chain_ids([layer.diff_id for layer in manifest.layers])
    needed = {layer.file for layer, chain in zip(manifest.layers, chains) if chain not in held}
    return frozenset(layer.file for layer, chain in zip(manifest.layers, chains) if chain in held and layer.file not in needed)
