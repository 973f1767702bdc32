"""`imagebuild build`: render, make the context, build through the engine, normalise, record.

prepare          prepare_build: the options checked, the Dockerfile and context made, the inputs hashed
core             build_image: the engine call, normalising, tagging only on success, the record
compile_cache    --compile-cache: what it names, and serving it to steps 4 and 7's ccache during the build
compile_cache_server  ccache's HTTP storage protocol over a directory or the user's remote (loaded only then)
podman_checks    what a build on Podman gives, and buildah's stale cached labels caught
record           BuildRecord: the one record of a build's facts, which the record, SBOM and provenance are made of
stream           following the classic builder's output: which step runs, cached or not
progress         how a build shows its progress on stderr (plain, a live line, GitHub groups)
checkout_labels  the checkout's remote, revision and commit time, asked of git
attestations     the SBOM and provenance, written beside the build record
sbom             the CycloneDX 1.6 SBOM (pure: of the record and the image's pip inventory)
provenance       the in-toto SLSA v1 provenance (pure: of the record and the engine's version)

May import: everything below it in imagebuild's floor plan (render, engine, normalize, project, ...);
never cli.
"""
