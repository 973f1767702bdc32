"""imagebuild: reproducible builds of the Kimi-K3 vLLM serving image for AMD MI300X.

The folders are the pipeline, in the order data flows; a package imports only the ones above it in
this list (``tests/unit/test_floor_plan.py`` holds the layers and checks every import):

    errors secrets log   the one error hierarchy, the one secret detector, progress on stderr
    util/                subprocesses, atomic files, clocks, retries: no knowledge of images
    importer/            the node-side importer (standard library only; shipped as a zipapp)
    launcher/            the serve launcher bundled into the image (standard library only)
    image_files/         the files step 3 puts into the image
    inputs/              reading stages/, arch profiles, pylock.toml; value kinds; shared facts (layout)
    engine/              the container engine: the interface, and docker-py behind it
    pins/                pins.toml as typed pins; SOURCE_DATE_EPOCH from them
    project              what makes a project (a checkout, or one init wrote), its inputs loaded once
    render/              inputs -> Dockerfile and build context (pure: no git, no engine)
    lock/                resolve pins to immutable identities; the python lock
    attest/              attestations: subjects, DSSE signing and verifying, what an image's layers hold
    scaffold/            a new project from a definition imagebuild ships (imagebuild init)
    normalize/           rewrite a built image's layers so the same pins give the same image ID
    distribute/          publish to a registry, export to a verified archive, import
    verify/              testinfra smoke checks against a built image
    diff/                what differs between two images
    build/               a build: context -> engine -> normalise -> record, SBOM, provenance
    slurm/               the sbatch script that starts the launcher on every node
    testing              fakes behind imagebuild's interfaces, for tests
    cli/                 every verb's arguments and output; the one exit
"""

__version__ = "0.1.0"
