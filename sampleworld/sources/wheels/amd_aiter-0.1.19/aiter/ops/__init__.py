"""Sample AITER ops."""
