"""Bit-identical rebuilds: a built image's layers rewritten so the same pins give the same image ID.

after_build  what `imagebuild build` does after the engine built the image: normalise, keep the cache
             (cache_image: the built config over the normalised layers, the next build's cache_from)
core         normalize_image: read the built image, rewrite it, load it back; which store, which archive
model        the plan, the rewritten image, the result, the failures
from_store   reading a local engine's store, no save (stored_layers: overlay2's tar-split, the containerd
             store's blobs; reuse: layers the last run made); from_save: docker save
config       the canonical config: times, build-only fields, history (empty layers, COPY digests)
lower        the filesystem below a layer, layer by layer; canonical: a layer reduced against it;
             lower_cache: what a containerd-store base holds, kept for the next normalisation
load_archive what the normalised image is loaded from: legacy (graph drivers) or OCI (containerd)
rewrite      one layer tar with its timestamps clamped (tar_writer: tarfile's "w" bytes, no per-entry copy)

The ``docker save`` reader and the layer store's tar rebuild are the engine's (engine.saved_image,
engine.tar_split; their bounded byte streams are util.streams): verify reads an image's layers and
export writes them, and neither may import this package.

May import: engine, pins, render, inputs and the packages below them.
"""
