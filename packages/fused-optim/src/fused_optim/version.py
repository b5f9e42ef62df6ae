"""The one place fused-optim's version is written (read by scikit-build-core's regex provider)."""

__version__ = "0.1.0"
