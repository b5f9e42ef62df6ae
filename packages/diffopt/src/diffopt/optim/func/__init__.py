"""The functional-style optimizer wrapper.

Example:
    >>> import diffopt
    >>> diffopt.optim.func.FuncOptimizer is diffopt.FuncOptimizer
    True
"""

from diffopt.optim.func.base import FuncOptimizer

__all__ = ["FuncOptimizer"]
