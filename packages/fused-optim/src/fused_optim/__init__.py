"""Placeholder during bring-up."""
from fused_optim import _C  # noqa: F401
