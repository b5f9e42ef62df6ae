"""Meta-gradient strategies beyond plain unrolling: implicit and zero-order differentiation.

The subpackages (``diffopt.diff.implicit``, ``diffopt.diff.zero_order``) are filled in by their
own modules; this file only makes ``diffopt.diff`` a package.
"""

__all__: list[str] = []
