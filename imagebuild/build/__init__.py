"""`imagebuild build`: render, make the context, build through the engine, normalise, record.

core             build_image: the options, the engine call, tagging only on success, the record
stream           following the classic builder's output: which step runs, cached or not
progress         how a build shows its progress on stderr (plain, a live line, GitHub groups)
checkout_labels  the checkout's remote, revision and commit time, asked of git
attestations     the SBOM and provenance, written beside the build record
sbom             the CycloneDX 1.6 SBOM (pure)
provenance       the in-toto SLSA v1 provenance (pure)

May import: everything below it in imagebuild's floor plan (render, engine, normalize, project, ...);
never cli.
"""
