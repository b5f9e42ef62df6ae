"""The tree operations under short names (``optree_core.pytree.map`` is
:func:`optree_core.tree_map`), and :func:`reexport`, which makes a copy of this module whose
functions default to a library's own namespace.

    >>> import optree_core.pytree as pytree
    >>> pytree.leaves({'b': (2, 3), 'a': 1})
    [1, 2, 3]
    >>> pytree.map(lambda x: x * 10, [1, (2,)])
    [10, (20,)]
"""

from __future__ import annotations

import builtins as _builtins
import functools as _functools
import inspect as _inspect
import sys as _sys
from collections.abc import Callable as _Callable
from types import ModuleType as _ModuleType
from typing import Any as _Any

from optree_core import dataclasses, functools
from optree_core.accessors import PyTreeEntry
from optree_core.ops import tree_accessors as accessors
from optree_core.ops import tree_all as all
from optree_core.ops import tree_any as any
from optree_core.ops import tree_broadcast_common as broadcast_common
from optree_core.ops import tree_broadcast_map as broadcast_map
from optree_core.ops import tree_broadcast_map_with_accessor as broadcast_map_with_accessor
from optree_core.ops import tree_broadcast_map_with_path as broadcast_map_with_path
from optree_core.ops import tree_broadcast_prefix as broadcast_prefix
from optree_core.ops import tree_flatten as flatten
from optree_core.ops import tree_flatten_one_level as flatten_one_level
from optree_core.ops import tree_flatten_with_accessor as flatten_with_accessor
from optree_core.ops import tree_flatten_with_path as flatten_with_path
from optree_core.ops import tree_is_leaf as is_leaf
from optree_core.ops import tree_iter as iter
from optree_core.ops import tree_leaves as leaves
from optree_core.ops import tree_map as map
from optree_core.ops import tree_map_ as map_
from optree_core.ops import tree_map_with_accessor as map_with_accessor
from optree_core.ops import tree_map_with_accessor_ as map_with_accessor_
from optree_core.ops import tree_map_with_path as map_with_path
from optree_core.ops import tree_map_with_path_ as map_with_path_
from optree_core.ops import tree_max as max
from optree_core.ops import tree_min as min
from optree_core.ops import tree_partition as partition
from optree_core.ops import tree_paths as paths
from optree_core.ops import tree_reduce as reduce
from optree_core.ops import tree_replace_nones as replace_nones
from optree_core.ops import tree_structure as structure
from optree_core.ops import tree_sum as sum
from optree_core.ops import tree_transpose as transpose
from optree_core.ops import tree_transpose_map as transpose_map
from optree_core.ops import tree_transpose_map_with_accessor as transpose_map_with_accessor
from optree_core.ops import tree_transpose_map_with_path as transpose_map_with_path
from optree_core.ops import tree_unflatten as unflatten
from optree_core.registry import (
    GLOBAL_NAMESPACE as _GLOBAL_NAMESPACE,
)
from optree_core.registry import (
    dict_insertion_ordered,
)
from optree_core.registry import (
    register_pytree_node as register_node,
)
from optree_core.registry import (
    register_pytree_node_class as register_node_class,
)
from optree_core.registry import (
    unregister_pytree_node as unregister_node,
)
from optree_core.typing import PyTreeKind, PyTreeSpec
from optree_core.version import __version__

# Several short names shadow builtins here (all, any, iter, map, max, min, sum): code below
# uses _builtins.
__all__ = [
    "reexport",
    "PyTreeSpec",
    "PyTreeKind",
    "PyTreeEntry",
    # the tree_* operations, in the order optree_core.__all__ lists them (a test checks)
    "accessors",
    "all",
    "any",
    "broadcast_common",
    "broadcast_map",
    "broadcast_map_with_path",
    "broadcast_map_with_accessor",
    "broadcast_prefix",
    "flatten",
    "flatten_one_level",
    "flatten_with_accessor",
    "flatten_with_path",
    "is_leaf",
    "iter",
    "leaves",
    "map",
    "map_",
    "map_with_accessor",
    "map_with_accessor_",
    "map_with_path",
    "map_with_path_",
    "max",
    "min",
    "paths",
    "partition",
    "reduce",
    "replace_nones",
    "structure",
    "sum",
    "transpose",
    "transpose_map",
    "transpose_map_with_path",
    "transpose_map_with_accessor",
    "unflatten",
    "register_node",
    "register_node_class",
    "unregister_node",
    "dict_insertion_ordered",
]


class ReexportedModule(_ModuleType):
    """A module standing for ``original`` whose functions that take a ``namespace`` default to
    ``namespace``; made by :func:`reexport`.

    Args:
        name: The module's name (its key in ``sys.modules``).
        namespace: The default namespace of the re-exported functions.
        original: The module whose ``__all__`` is re-exported (``reexport`` itself excluded).
        extra_members: Attributes set as they are (listed by ``dir``, not in ``__all__``).

    >>> import optree_core.pytree as pytree
    >>> mod = pytree.ReexportedModule('doc_mod', namespace='doc-ns', original=pytree)
    >>> mod.leaves([1, (2,)]), 'reexport' in mod.__all__
    ([1, 2], False)
    """

    def __init__(self, name: str, *, namespace: str, original: _ModuleType,
                 extra_members: dict[str, _Any] | None = None) -> None:
        super().__init__(name, f"{original.__name__} with functions defaulting to namespace "
                               f"{namespace!r}.")
        exported = sorted(n for n in original.__all__ if n != "reexport")
        self.__dict__["_ReexportedModule__namespace"] = namespace
        self.__dict__["_ReexportedModule__original"] = original
        self.__dict__["__all__"] = exported
        listed = {n for n in exported if not n.startswith("_")}
        for key, value in (extra_members or {}).items():
            setattr(self, key, value)
            listed.add(key)
        self.__dict__["_ReexportedModule__dir"] = sorted(listed)

    def __dir__(self) -> list[str]:
        return list(self.__dir)

    def __getattr__(self, name: str) -> _Any:
        if name not in self.__all__:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        value = getattr(self.__original, name)
        if _inspect.isfunction(value):
            value = self._with_default_namespace(value)
        setattr(self, name, value)  # computed once
        return value

    def _with_default_namespace(self, func: _Callable[..., _Any]) -> _Callable[..., _Any]:
        if "namespace" not in _inspect.signature(func).parameters:
            return func
        default = self.__namespace

        @_functools.wraps(func)
        def with_namespace(*args: _Any, namespace: str = default, **kwargs: _Any) -> _Any:
            return func(*args, namespace=namespace, **kwargs)

        lookup = getattr(func, "get", None)
        if callable(lookup):  # register_node.get lists that namespace's registrations
            with_namespace.get = self._with_default_namespace(lookup)  # type: ignore[attr-defined]
        return with_namespace


def reexport(*, namespace: str, module: str | None = None) -> _ModuleType:
    """Make (and put in ``sys.modules``) a copy of this module, with ``.dataclasses`` and
    ``.functools`` submodules, whose functions default to ``namespace``: a library calls
    ``pytree = optree_core.pytree.reexport(namespace='mylib')`` once and then ``pytree.map``,
    ``@pytree.dataclasses.dataclass``, ``pytree.register_node`` without repeating it.

    Args:
        namespace: The default namespace (``''`` or ``GLOBAL_NAMESPACE``: the global one).
        module: The new module's name; by default ``<caller's module>.pytree``.

    Returns:
        The new module.

    Raises:
        TypeError: if ``namespace`` is not a string.
        ValueError: if ``module`` is not a dotted name of identifiers, or it (or one of its two
            submodules) is already in ``sys.modules``.

    >>> import optree_core.pytree as pytree
    >>> mylib = pytree.reexport(namespace='mylib-doc', module='mylib_doc.pytree')
    >>> @mylib.dataclasses.dataclass
    ... class Pair:
    ...     a: int
    ...     b: int
    >>> mylib.leaves(Pair(1, 2)), pytree.leaves(Pair(1, 2)) == [Pair(1, 2)]
    ([1, 2], True)
    """
    if namespace is _GLOBAL_NAMESPACE:
        namespace = ""
    elif not isinstance(namespace, str):
        raise TypeError(f"The namespace must be a string, got {namespace!r}.")
    if module is None:
        module = f"{_sys._getframe(1).f_globals.get('__name__', '__main__')}.pytree"
    if not isinstance(module, str) or not _builtins.all(p.isidentifier() for p in module.split(".")):
        raise ValueError(f"invalid module name: {module!r} is not a dotted name of identifiers.")
    names = (module, f"{module}.dataclasses", f"{module}.functools")
    for name in names:
        if name in _sys.modules:
            raise ValueError(f"module {name!r} already exists; pick another module name.")
    sub_dataclasses = ReexportedModule(names[1], namespace=namespace, original=dataclasses)
    sub_functools = ReexportedModule(names[2], namespace=namespace, original=functools)
    reexported = ReexportedModule(module, namespace=namespace, original=_sys.modules[__name__],
                                  extra_members={"__version__": __version__,
                                                 "dataclasses": sub_dataclasses,
                                                 "functools": sub_functools})
    for name, mod in zip(names, (reexported, sub_dataclasses, sub_functools)):
        _sys.modules[name] = mod
    return reexported
