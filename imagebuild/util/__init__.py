"""Generic helpers with no knowledge of images: every subprocess (``run``), atomic file writes (``files``).

Nothing here imports the rest of imagebuild except ``errors`` and ``log``, so any module may use it.
"""
