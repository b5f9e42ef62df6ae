"""The import alias behind ci/compat: ``COMPAT_ALIAS=optree:optree_core`` makes ``import optree``
(and every ``optree.x``) return the very module objects of ``optree_core`` (``optree_core.x``).

Used by the pytest plugin (``alias_plugin``) and, through a ``.pth`` file ``run.py`` writes for
the duration of a run, by every Python subprocess a peer's test starts (several of optree's tests
run ``import optree`` in a fresh interpreter). Without the variable nothing happens.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolve ``alias`` and ``alias.*`` to ``target`` and ``target.*`` (same module objects)."""

    def __init__(self, alias: str, target: str) -> None:
        self.alias, self.target = alias, target

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.alias and not fullname.startswith(self.alias + "."):
            return None
        real_name = self.target + fullname[len(self.alias):]
        try:
            real = importlib.import_module(real_name)
        except ModuleNotFoundError as exc:
            if exc.name == real_name:
                return None  # the peer's module has no counterpart: a plain ImportError
            raise
        is_package = hasattr(real, "__path__")
        return importlib.util.spec_from_loader(fullname, self, is_package=is_package)

    def create_module(self, spec):
        real = importlib.import_module(self.target + spec.name[len(self.alias):])
        # importlib overwrites __spec__ on the module it is handed; keep the real one.
        self._saved_spec = real.__spec__
        return real

    def exec_module(self, module):
        module.__spec__ = self._saved_spec


def install_alias() -> None:
    pair = os.environ.get("COMPAT_ALIAS")
    if not pair:
        return
    alias, target = pair.split(":")
    if any(isinstance(f, _AliasFinder) and f.alias == alias for f in sys.meta_path):
        return  # already installed (the .pth file ran first in this interpreter)
    for name in [n for n in sys.modules if n == alias or n.startswith(alias + ".")]:
        del sys.modules[name]  # a peer imported earlier (e.g. by torch) must not shadow ours
    sys.meta_path.insert(0, _AliasFinder(alias, target))
