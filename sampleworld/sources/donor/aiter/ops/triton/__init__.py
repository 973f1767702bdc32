"""Sample AITER Triton ops (donor)."""
