"""The container engine: a small interface, and docker-py behind it.

interface        Engine and its typed requests and events: what the rest of imagebuild talks to
docker           DockerEngine, the one adapter: the only module (with credentials and address) that imports docker
http_api         HttpEngine: a cached build's calls over http.client on a local socket; DockerEngine for the rest
credentials      registry credentials as docker resolves them (auths, credsStore, credHelpers)
overlay2_store   where a local overlay2 engine keeps an image's layers (the normaliser's and export's fast path)
tar_split        a layer's tar rebuilt byte for byte from that store, as ``docker save`` rebuilds it
store_kind       which engine and image store answer (graph driver, containerd store, Podman)
containerd_store where the containerd image store keeps an image: its manifest, config and layer blobs
content_blobs    a layer's bytes from its blob in that content store: as stored, or its tar decompressed
chain_ids        the OCI chain IDs that name a stack of layers
saved_image      reading an image from a ``docker save`` stream, one pass, layer by layer
unreachable      why the engine could not be reached, in the words of the person who must fix it
registry_errors  a registry's failure, as the engine reported it

May import: errors, util, launcher.text, and importer's docker_api (the one reader of docker's stream
messages, shared with the nodes' standard-library engine), decompress (gzip and zstd streams, shared
with the importer) and socket_engine's UnixConnection. Never a feature package.
"""
