"""The importer: verify an archive `imagebuild export` wrote and load it into a Docker engine.

One implementation for two callers: `imagebuild import` uses these modules with imagebuild's own
engine, and `export` ships the same files next to every archive as ``imagebuild-import.pyz`` (a
zipapp, see ``imagebuild.distribute.shipped_importer``) for nodes that have only python3 and docker.
Hence the rules here: the standard library only, Python 3.8 syntax and library, and modules that
import each other relatively (in the zipapp the package is not under ``imagebuild``).

failures       the one-line failures and their exit codes (imagebuild's own)
manifest       the manifest format: the Manifest written by export, read and checked here
verified_load  import_archive: hash while streaming into an engine, check, then tag; ImportEngine
podman_load    load_into_podman: --runtime podman, checked, `podman load`, identity checked, tagged
check_only     check_archive: size, sha256 (a squashfs's superblock), nothing loaded (--check-only)
load_stream    what the engine is sent: the archive decompressed here, stopped past its declared size
decompress     gzip and zstd streams, chunk by chunk (also the engine's reader of compressed layer blobs)
tar_filter     that tar without the names it carries (RepoTags, repositories, index.json annotations)
held_layers    which layer files the engine holds already (by chain ID): read and hashed, not sent
load_room      whether the engine's disk has room for the rest (twice their bytes), before a byte is read
dockerd_process the dockerd serving a data root: its DOCKER_TMPDIR (its copy of a load), its containerd
processes     this machine's processes from /proc: by name, command line, parent, listening sockets
unpack_room    whether a squashfs's runtime has room to unpack it (--check-only --unpack-into DIR)
containerd_root where the containerd store's containerd keeps its root (shared with imagebuild's reader)
tag_guard      the second line: any tag a load still created or moved, undone
text           values from a manifest or an engine, escaped for a terminal
docker_api     the engine API's load and error messages, as both engines read them
docker_context which engine `docker` uses: DOCKER_HOST, else DOCKER_CONTEXT, else the config's current context
socket_engine  SocketEngine: the engine API over that address with http.client
cli            main(): what the shipped zipapp runs
"""
