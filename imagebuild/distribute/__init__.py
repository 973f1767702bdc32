"""Getting a built image to the nodes of a cluster: publish to a registry, or export a verified archive.

One job per module: ``publish`` (push by digest, record the reference), ``export`` (stream the image
into a content-addressed archive and its manifest), ``importer/`` (the manifest format; verify and load
an archive: a standard-library package), ``shipped_importer`` (that package as the zipapp export
writes next to each archive), ``local_import`` (the same package behind `imagebuild import`),
``compression`` (how archives are compressed) and ``commands`` (the command line).
"""
