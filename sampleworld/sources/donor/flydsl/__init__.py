"""Sample flydsl 0.2.2 as the donor image ships it (code only, no dist-info)."""

__version__ = "0.2.2"
