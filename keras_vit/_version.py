"""The package version (one place; `keras_vit.__version__` and run records read it)."""

__version__ = "0.1.0"
