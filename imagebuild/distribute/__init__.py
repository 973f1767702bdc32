"""Getting a built image to the nodes of a cluster: publish to a registry, or export a verified archive.

One job per module: ``publish`` (push by digest, record the reference), ``export`` (stream the image
into a content-addressed archive and its manifest), ``importer`` (verify and load an archive; the
standard-library file that export ships next to each archive), ``compression`` (how archives are
compressed) and ``commands`` (the command line).
"""
