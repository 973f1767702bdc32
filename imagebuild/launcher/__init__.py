"""The serve launcher bundled into the image; standard library only, see ``serve.py``."""
