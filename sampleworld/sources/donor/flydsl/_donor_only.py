# mypy: ignore-errors
# (A stand-in for code that runs in the sample base image's python, not part of the typed package.)
"""Present in the donor's flydsl 0.2.2, absent from 0.2.4: left behind if the re-pin does not clean up."""

LEGACY_INT4_PATH = True
