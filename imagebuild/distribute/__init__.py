"""Getting a built image to the nodes of a cluster: publish to a registry, or export a verified archive.

One job per module: ``publish`` (push by digest, record the reference), ``export`` (stream the image
into a content-addressed archive and its manifest), ``shipped_importer`` (``imagebuild.importer``, the
standard-library manifest reader and verified loader, as the zipapp export writes next to each archive),
``local_import`` (the same package behind `imagebuild import`), ``archive_layout`` (any engine's save
stream made into the archive every engine and image store loads) and ``compression`` (how archives
are compressed); ``formats`` (``--format oci|squashfs``: ``spooled_image`` spools the save once,
``oci_layout`` writes the OCI layout, ``rootfs`` flattens the layers, ``runtime_files`` writes enroot's
and Charliecloud's files, ``squashfs`` runs tar2sqfs, ``fixed_tar`` the deterministic headers);
``record_notes`` notes in the build record where the image went (publish's reference,
export's manifest), for ``imagebuild slurm --from-record``. The command line is ``imagebuild.cli.distribute``.

May import: attest (the statements export and publish write), engine, importer, inputs and the packages below them.
"""
