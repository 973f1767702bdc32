"""Sample flydsl 0.2.4: the K3 int4 SiTUv2 MoE path needs this version."""

__version__ = "0.2.4"
