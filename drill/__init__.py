"""drill: interview practice for transformer internals."""

__version__ = "0.1.0"
