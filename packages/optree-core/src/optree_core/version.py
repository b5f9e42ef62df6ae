"""The version of optree-core (the one place it is written)."""

__version__ = "0.1.0"
