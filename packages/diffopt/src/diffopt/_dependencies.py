"""Import-time checks that the compiled sibling packages are recent enough (jax-style)."""

from __future__ import annotations

import importlib
import importlib.util
import re

__all__ = ["check_dependencies"]

_MIN_OPTREE_CORE = (0, 1, 0)
_MIN_FUSED_OPTIM = (0, 1, 0)


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def _check(module_name: str, dist_name: str, minimum: tuple[int, ...], required: bool) -> None:
    if importlib.util.find_spec(module_name) is None:
        if required:
            raise ImportError(
                f"diffopt needs the {dist_name} package (>= {'.'.join(map(str, minimum))}), "
                f"which is not installed: pip install '{dist_name}>={'.'.join(map(str, minimum))}'"
            )
        return
    module = importlib.import_module(module_name)
    found = _version_tuple(getattr(module, "__version__", "0"))
    if found < minimum:
        raise ImportError(
            f"diffopt needs {dist_name} >= {'.'.join(map(str, minimum))}, but "
            f"{getattr(module, '__version__', 'an unknown version')} is installed; "
            f"upgrade it: pip install -U '{dist_name}>={'.'.join(map(str, minimum))}'"
        )


def check_dependencies() -> None:
    """Raise an ImportError naming the package to upgrade when a sibling is too old.

    optree-core is required. fused-optim is checked when installed; without it everything works
    except ``use_accelerated_op=True``, which then raises an ImportError naming fused-optim.
    """
    _check("optree_core", "optree-core", _MIN_OPTREE_CORE, required=True)
    _check("fused_optim", "fused-optim", _MIN_FUSED_OPTIM, required=False)
