"""Present in the donor's flydsl 0.2.2, absent from 0.2.4: left behind if the re-pin does not clean up."""

LEGACY_INT4_PATH = True
