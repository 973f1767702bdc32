"""Bit-identical rebuilds: a built image's layers rewritten so the same pins give the same image ID.

after_build  what `imagebuild build` does after the engine built the image: normalise, keep the cache
core         normalize_image: the built image, its timestamps clamped to SOURCE_DATE_EPOCH
archive      reading an image from a ``docker save`` stream, one pass
layer_names  which entry of a ``docker save`` stream holds which layer
tar_split    a layer's tar rebuilt byte for byte from the engine's layer store
rewrite      one layer tar with its timestamps clamped
streams      byte streams with bounded memory

May import: engine, pins, render, inputs and the packages below them.
"""
