"""The library version (a leaf, so that io can stamp files without importing the package)."""

__version__ = "0.2.0"  # keep equal to pyproject.toml's and CITATION.cff's (tests/test_release.py checks)
DISTRIBUTION = "learngene-vit"  # the name pip knows it by (pyproject.toml's); the import name is learngene
