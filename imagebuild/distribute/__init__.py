"""Getting a built image to the nodes of a cluster: publish to a registry, or export a verified archive.

One job per module: ``publish`` (push by digest, record the reference), ``export`` (stream the image
into a content-addressed archive and its manifest), ``shipped_importer`` (``imagebuild.importer``, the
standard-library manifest reader and verified loader, as the zipapp export writes next to each archive),
``local_import`` (the same package behind `imagebuild import`), ``archive_layout`` (any engine's save
stream made into the archive every engine and image store loads) and ``compression`` (how archives
are compressed); ``formats`` (``--format oci|squashfs``: ``spooled_image`` spools the layers once, from the engine's store or its save,
or reads overlay2's where they are,
``oci_layout`` writes the OCI layout, ``rootfs`` flattens the layers, ``runtime_files`` writes enroot's
and Charliecloud's files, ``squashfs`` runs tar2sqfs, ``fixed_tar`` the deterministic headers);
``record_notes`` notes in the build record where the image went (publish's reference,
export's manifest), for ``imagebuild slurm --from-record``, and reads back the documents a build wrote.
The attestations go with the image: ``referrers`` (OCI 1.1 artifact manifests and the referrers
index, pure data), ``registry_http`` (one repository over the distribution API, with requests),
``attach`` (publish's push of the documents as artifacts referring to the image) and ``attached``
(`imagebuild attestations REF`: list, download, verify). The command line is ``imagebuild.cli.distribute``
and ``imagebuild.cli.attestations``.

May import: attest (the statements export and publish write), engine, importer, inputs, lock (its HTTP
helper and registry authentication) and the packages below them.
"""
