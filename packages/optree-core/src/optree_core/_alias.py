"""Standing in for optree: ``import optree`` resolves to optree_core, and PyTorch is told so."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType
from typing import Any

__all__ = ["install_as_optree"]

_ALIAS, _TARGET = "optree", "optree_core"


class _OptreeAliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves ``optree`` and ``optree.<sub>`` to the very module objects of optree_core."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != _ALIAS and not fullname.startswith(_ALIAS + "."):
            return None
        real_name = _TARGET + fullname[len(_ALIAS):]
        if importlib.util.find_spec(real_name) is None:
            return None  # optree has it, optree_core does not: a plain ModuleNotFoundError
        real = importlib.import_module(real_name)
        return importlib.util.spec_from_loader(fullname, self, is_package=hasattr(real, "__path__"))

    def create_module(self, spec: Any) -> ModuleType:
        real = importlib.import_module(_TARGET + spec.name[len(_ALIAS):])
        self._real_spec = real.__spec__  # importlib overwrites __spec__ of what it is handed
        return real

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._real_spec


def install_as_optree(*, torch: bool = True) -> None:
    """Make ``import optree`` give optree_core, and let PyTorch's C++ pytree use it.

    PyTorch decides whether ``torch.utils._cxx_pytree`` may be used from the installed
    *distribution* named ``optree`` (``importlib.metadata``), so aliasing the import alone is not
    enough. With ``torch=True`` (and torch installed) this also marks optree as present in
    ``torch.utils._pytree`` and imports ``torch.utils._cxx_pytree`` once, so that
    ``torch.utils._pytree.register_pytree_node`` registers each type with optree_core as well.
    Dynamo's optree polyfills are left off: under ``torch.compile`` a call into optree_core
    breaks the graph instead of being traced.

    Call it before anything imports ``optree`` or ``torch.utils._cxx_pytree``. Calling it again
    does nothing.

    Args:
        torch: Also set up PyTorch's ``torch.utils._cxx_pytree`` (skipped when torch is absent).

    Raises:
        RuntimeError: if the real optree (or torch's C++ pytree built on it) is already imported.

    >>> import optree_core
    >>> optree_core.install_as_optree(torch=False)
    >>> import optree
    >>> optree is optree_core
    True
    """
    loaded = sys.modules.get(_ALIAS)
    if loaded is not None and loaded is not sys.modules[_TARGET]:
        raise RuntimeError("install_as_optree() must run before the real optree package is "
                           "imported; it already is (imported from "
                           f"{getattr(loaded, '__file__', '?')}).")
    if not any(isinstance(f, _OptreeAliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _OptreeAliasFinder())
    for name in [n for n in sys.modules if n == _TARGET or n.startswith(_TARGET + ".")]:
        sys.modules.setdefault(_ALIAS + name[len(_TARGET):], sys.modules[name])
    if torch and importlib.util.find_spec("torch") is not None:
        _enable_torch_cxx_pytree()


def _enable_torch_cxx_pytree() -> None:
    cxx = sys.modules.get("torch.utils._cxx_pytree")
    if cxx is not None:
        if cxx.optree is not sys.modules[_TARGET]:
            raise RuntimeError("torch.utils._cxx_pytree was already imported with the real optree; "
                               "call install_as_optree() before importing it.")
        return
    python_pytree = importlib.import_module("torch.utils._pytree")
    traceable = python_pytree._cxx_pytree_dynamo_traceable
    if not python_pytree._cxx_pytree_exists:
        # torch set these flags from the optree distribution's version when it was imported, and
        # so did not queue the types registered since (torch.Size, torch.return_types...) for
        # the C++ pytree: queue them now, as torch would have; _cxx_pytree registers them.
        python_pytree._cxx_pytree_exists = True
        with python_pytree._NODE_REGISTRY_LOCK:
            for cls, node in python_pytree.SUPPORTED_NODES.items():
                if cls in python_pytree.BUILTIN_TYPES:
                    continue
                serialized = python_pytree.SUPPORTED_SERIALIZED_TYPES.get(cls)
                kwargs = {} if serialized is None else {
                    "serialized_type_name": serialized.serialized_type_name,
                    "to_dumpable_context": serialized.to_dumpable_context,
                    "from_dumpable_context": serialized.from_dumpable_context,
                }
                python_pytree._cxx_pytree_pending_imports.append(
                    ((cls, node.flatten_fn, node.unflatten_fn), kwargs))
    python_pytree._cxx_pytree_dynamo_traceable = True  # _cxx_pytree refuses to import otherwise
    try:
        importlib.import_module("torch.utils._cxx_pytree")
    finally:
        # Keep Dynamo's optree polyfills (which read optree's Python-level registry) off unless
        # a real, new-enough optree had already turned them on.
        python_pytree._cxx_pytree_dynamo_traceable = traceable
