"""Sample AITER ops (donor)."""
