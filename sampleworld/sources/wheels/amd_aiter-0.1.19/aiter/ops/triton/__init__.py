"""Sample AITER Triton ops."""
