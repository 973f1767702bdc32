"""Generic helpers with no knowledge of images: every subprocess (``run``), atomic file writes (``files``),
byte streams with bounded memory and tar entries as chunks (``streams``; tarfile's header checksums
computed in C, ``tar_checksums``), and a JSON file a user names read with every failure one line (``json_file``).

Nothing here imports the rest of imagebuild except ``errors`` and ``log``, so any module may use it.
"""
