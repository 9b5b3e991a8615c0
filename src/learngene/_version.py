"""The library version (a leaf, so that io can stamp files without importing the package)."""

__version__ = "0.1.0"  # keep equal to pyproject.toml's
