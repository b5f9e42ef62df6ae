"""The single home of diffopt's version string (read by hatchling at build time)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
