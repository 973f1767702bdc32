"""The normaliser's data: the plan for a built image, the rewritten image, the result; its failures."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from imagebuild.engine.interface import EngineStore, ImageInfo, StoredImage
from imagebuild.normalize.config import BuildLayer, HistoryMismatch, build_layers, normalized_config

if TYPE_CHECKING:  # the tar machinery stays off the path of a build that reuses its normalisation
    from imagebuild.normalize.rewrite import RewriteResult

# Where the built image was read from: overlay2's layer store, the containerd store's content store, or save.
FROM_STORE, FROM_CONTENT, FROM_SAVE = "layer store", "content store", "docker save"
# Bump when a rule changes what an image normalises to: a build record made under other rules is not
# reused (after_build.previous_normalization).
RULES = 9  # 9: an entry equal to the one below but in its mtime is left out; 8: parents dated by their names


class NormalizeFailure(Exception):
    """Normalisation could not be done; the message says why (the caller adds what to do)."""


class StoreUnavailable(NormalizeFailure):
    """The engine's store cannot be read from here at all (a remote engine, another storage driver, an
    unreadable data root): only ``save`` gives the image."""


class StoreReadFailure(Exception):
    """The engine's store did not give the image the engine reports: normalisation reads ``save`` instead."""


@dataclass(frozen=True, kw_only=True)
class LayerNote:
    """What a build record keeps of each build layer's normalisation, so that the next run can skip it.

    The normalised layer is a function of the built layer and everything below it (its chain ID),
    the epochs and pinning of the steps up to it, and the rules: with all of those the same, the
    next run takes ``diff_id`` from here and the layer from the engine instead of rewriting it.
    """

    built: str  # the built layer's chain ID: its content and that of every layer below it
    epoch: int
    pinned: bool  # every time pinned to the epoch (a COPY of the build context)
    diff_id: str  # the normalised layer's diffID; "" when it held nothing and was dropped

    def same_input(self, other: LayerNote) -> bool:
        return (self.built, self.epoch, self.pinned) == (other.built, other.epoch, other.pinned)

    def made(self, diff_id: str, step: LayerNote) -> bool:
        """Whether a built layer ``diff_id`` of ``step`` is this note's normalised layer, for the same epoch and
        pinning: the layer cache image gave it back (imagebuild.normalize.cache_image)."""
        return bool(self.diff_id) and self.diff_id == diff_id and (self.epoch, self.pinned) == (step.epoch, step.pinned)


@dataclass(frozen=True, kw_only=True)
class LayerPlan:
    """What to do with the layers of one built image."""

    layers: tuple[str, ...]  # the image's diffIDs, as the engine reports them
    base_layers: int  # how many of them are the base image's: kept byte for byte
    base_history: int  # history entries of the base image: kept as they are
    epochs: tuple[int, ...]  # one per step after FROM, in order: the mtime clamp of the layer it made
    created: int  # the config's created time and the build's history entries
    context_copies: tuple[bool, ...] = ()  # per step after FROM: a COPY from the build context (see RenderedStep)
    previous: tuple[LayerNote, ...] = ()  # the last run's build layers (its record), to reuse what did not change
    # The last run's normalised build layers, lowest first (its notes that hold anything): a build
    # that starts with them took them from the layer cache image, and they are taken as they are.
    normalized: tuple[LayerNote, ...] = ()
    # An intermediate image of the build (imagebuild.normalize.ahead): its history has the first of
    # ``epochs``' steps only.
    prefix: bool = False

    @property
    def kept(self) -> tuple[str, ...]:
        return self.layers[: self.base_layers]

    def build_layers(self, config: Mapping[str, Any], what: str) -> tuple[BuildLayer, ...]:
        """Which step made each layer above the base (NormalizeFailure when the history does not fit)."""
        try:
            return build_layers(
                config,
                base_history=self.base_history,
                base_layers=self.base_layers,
                layers=len(self.layers),
                epochs=self.epochs,
                context_copies=self.context_copies,
                what=what,
                prefix=self.prefix,
            )
        except HistoryMismatch as e:
            raise NormalizeFailure(str(e)) from e


@dataclass(frozen=True, kw_only=True)
class NormalizedLayer:
    diff_id: str
    # The rewritten tar in the spool; None for a layer streamed into the load as it was rewritten, or
    # one the engine holds (reused).
    path: Path | None
    size: int
    entries: int
    clamped: int
    history: int  # the history entry of the step that made it
    member: str = ""  # streamed: its file in the load archive (named before its diffID is known)
    # What the rewrite read of the built layer and the times it wrote: normalize_stored keeps them for
    # the next rebuild that takes this layer from the engine (normalize.reuse), then drops them.
    facts: RewriteResult | None = field(default=None, compare=False, repr=False)

    @property
    def rewritten(self) -> bool:
        """Made by this run (spooled or streamed), not taken from the engine."""
        return self.path is not None or bool(self.member)

    @classmethod
    def written(cls, result: RewriteResult, path: Path | None, layer: BuildLayer, *, member: str = "") -> NormalizedLayer:
        """The layer the rewriter wrote for ``layer``: to ``path`` in the spool, or streamed as ``member``."""
        return cls(
            diff_id=result.diff_id,
            path=path,
            size=result.size,
            entries=result.entries,
            clamped=result.clamped,
            history=layer.history,
            member=member,
            facts=result,
        )


@dataclass(frozen=True, kw_only=True)
class Normalized:
    """The rewritten image, on disk in ``workdir`` until loaded."""

    image_id: str  # the identity: sha256 of config_bytes
    config_bytes: bytes
    diff_ids: tuple[str, ...]  # every layer, base included
    layers: tuple[NormalizedLayer, ...]  # the rewritten layers that hold anything (empty ones are dropped)
    spool_peak: int  # most bytes the spool held at once
    read_seconds: float  # reading the saved stream (the build's layers spooled and hashed)
    rewrite_seconds: float
    # The base's layers as the engine holds them (the saved OCI manifest's descriptors; from a legacy
    # save, each as an uncompressed layer by its diffID): what a manifest of the image names them by,
    # on the containerd store and on Podman.
    base_descriptors: tuple[dict[str, Any], ...] = ()
    notes: tuple[LayerNote, ...] = ()  # per build layer, for the next run (read from the engine's store)


@dataclass(frozen=True, kw_only=True)
class AheadWork:
    """What was normalised while the build ran (imagebuild.normalize.ahead)."""

    prefixes: int = 0  # the build's intermediate images normalised
    layers: int = 0  # build layers rewritten then (the normalisation after the build took them as they were)
    bytes: int = 0  # their size
    seconds: float = 0.0  # spent on it, beside the build
    stopped: str = ""  # why it stopped early: the normalisation after the build did the rest


@dataclass(frozen=True, kw_only=True)
class NormalizeResult:
    image_id: str  # the identity: the normalised config's digest, the same on every engine
    unnormalized_id: str
    layers_rewritten: int
    bytes_rewritten: int  # the rewritten layers' size: the engine stores them besides the cache's
    spool_peak: int  # temporary disk in the work directory
    seconds: float
    # Seconds each: save, rewrite, load; from the layer store, reading is part of rewrite.
    phases: dict[str, float] = field(default_factory=dict)
    reused: bool = False  # a previous run's result was still in the engine
    read_from: str = FROM_SAVE  # FROM_STORE, FROM_CONTENT or FROM_SAVE
    fallback_reason: str = ""  # why not from the layer store, when from save
    engine_id: str = ""  # what the engine calls it: image_id, or on the containerd store its manifest digest
    engine: str = ""  # EngineStore.describe(): which engine and image store
    rules: int = RULES  # the normalisation rules it was made under
    layers_reused: int = 0  # build layers the last run normalised from the same inputs: taken from the engine
    layers: tuple[LayerNote, ...] = ()  # per build layer: what the next run may reuse
    ahead: AheadWork | None = None  # done while the build ran (None: not tried)
    # The layer cache image kept for the next build (imagebuild.normalize.cache_image); "" when none.
    cache_image: str = ""

    def to_json(self) -> dict[str, object]:
        from dataclasses import asdict

        return asdict(self)


class ImageStore(Protocol):
    """The engine as normalisation needs it."""

    def save(self, image_id: str) -> Iterator[bytes]: ...
    def stored_image(self, image_id: str) -> StoredImage: ...
    def load(self, chunks: Iterable[bytes]) -> list[str]: ...
    def store(self) -> EngineStore: ...
    def inspect_image(self, ref: str) -> ImageInfo: ...
    def remove_image(self, image_id: str) -> None: ...


def remove_untagged(store: ImageStore, image_id: str) -> None:
    """Remove ``image_id`` unless a name still holds it (another tag's cache, a user's tag): removing an
    image by ID would take its one name with it."""
    if not store.inspect_image(image_id).tags:
        store.remove_image(image_id)


def assemble(
    config: dict[str, Any],
    plan: LayerPlan,
    rewritten: Sequence[NormalizedLayer],
    *,
    spool_peak: int,
    read_seconds: float,
    rewrite_seconds: float,
    base_descriptors: tuple[dict[str, Any], ...] = (),
    notes: tuple[LayerNote, ...] = (),
) -> Normalized:
    """The normalised image: empty build layers dropped (their step marked empty_layer), config canonical."""
    kept = tuple(layer for layer in rewritten if layer.entries)
    for layer in rewritten:
        if not layer.entries and layer.path is not None:
            layer.path.unlink(missing_ok=True)
    diff_ids = (*plan.kept, *(layer.diff_id for layer in kept))
    made = {layer.history: layer.diff_id if layer.entries else "" for layer in rewritten}
    config_bytes = normalized_config(config, diff_ids, base_history=plan.base_history, created=plan.created, made=made)
    return Normalized(
        image_id="sha256:" + hashlib.sha256(config_bytes).hexdigest(),
        config_bytes=config_bytes,
        diff_ids=diff_ids,
        layers=kept,
        spool_peak=spool_peak,
        read_seconds=read_seconds,
        rewrite_seconds=rewrite_seconds,
        base_descriptors=base_descriptors,
        notes=notes,
    )
