"""Meta-gradient strategies beyond plain unrolling: implicit and zero-order differentiation.

``diffopt.diff.implicit`` and ``diffopt.diff.zero_order`` are exported when present, so this
package imports cleanly while either is missing.

Example:
    >>> import diffopt
    >>> diffopt.diff.__name__
    'diffopt.diff'
"""

import importlib as _importlib
import importlib.util as _importlib_util

__all__: list[str] = []

for _name in ("implicit", "zero_order"):
    if _importlib_util.find_spec(f"diffopt.diff.{_name}") is not None:
        globals()[_name] = _importlib.import_module(f"diffopt.diff.{_name}")
        __all__.append(_name)
del _name
