"""The image checks, as pytest-testinfra modules run by ``imagebuild.verify.runner``."""
