"""Files imagebuild puts into the image at step 3 (see imagebuild.render.context)."""
