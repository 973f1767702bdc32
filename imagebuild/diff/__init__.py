"""`imagebuild diff`: what differs between two images, semantically.

``tree`` indexes layers and flattens them, ``compare`` compares two indexed
images, ``report`` formats the result, ``sources`` reads an image from the
engine or an archive; the command line is ``imagebuild.cli.diff``.
"""
