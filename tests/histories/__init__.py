"""Golden run histories: the stored format, pinned (see README.md here)."""
