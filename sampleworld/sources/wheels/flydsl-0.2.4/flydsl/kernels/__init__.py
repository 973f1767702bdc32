"""Sample flydsl kernels."""
