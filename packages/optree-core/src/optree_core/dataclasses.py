"""Dataclasses that are pytree nodes: ``init=True`` fields marked ``pytree_node`` are children,
the other fields are metadata.

    >>> import optree_core as optree
    >>> from optree_core import dataclasses as odc
    >>> @odc.dataclass(namespace='doc')
    ... class Linear:
    ...     weight: float
    ...     bias: float
    ...     name: str = odc.field(default='fc', pytree_node=False)
    >>> optree.tree_leaves(Linear(1.0, 2.0), namespace='doc')
    [1.0, 2.0]
    >>> optree.tree_map(lambda x: x * 10, Linear(1.0, 2.0), namespace='doc')
    Linear(weight=10.0, bias=20.0, name='fc')
"""

from __future__ import annotations

import dataclasses as _dataclasses
import sys
from collections.abc import Callable
from typing import Any

from optree_core.accessors import DataclassEntry
from optree_core.registry import register_pytree_node

__all__ = ["field", "dataclass", "make_dataclass", "fields", "asdict", "astuple", "replace",
           "is_dataclass", "FrozenInstanceError", "InitVar", "KW_ONLY", "MISSING"]

fields = _dataclasses.fields
asdict = _dataclasses.asdict
astuple = _dataclasses.astuple
replace = _dataclasses.replace
is_dataclass = _dataclasses.is_dataclass
FrozenInstanceError = _dataclasses.FrozenInstanceError
InitVar = _dataclasses.InitVar
KW_ONLY = _dataclasses.KW_ONLY
MISSING = _dataclasses.MISSING

_PYTREE_NODE = "pytree_node"


def field(*, pytree_node: bool | None = None, metadata: dict[str, Any] | None = None,
          **kwargs: Any) -> Any:
    """``dataclasses.field`` with ``pytree_node`` (default True) saying whether the field is a
    child (True) or metadata (False). Fields with ``init=False`` must say ``pytree_node=False``:
    they cannot be passed back to ``__init__`` when the tree is rebuilt.

    Args:
        pytree_node: Whether the field is a child (``True``, the default) or metadata kept in the
            treespec (``False``).
        metadata: Extra field metadata, as for ``dataclasses.field``; the ``pytree_node`` flag is
            added to a copy of it.
        **kwargs: Any other keyword of ``dataclasses.field`` (``default``, ``default_factory``,
            ``init``, ``repr``...).

    >>> from optree_core import dataclasses as odc
    >>> import optree_core as optree
    >>> @odc.dataclass(namespace='field-doc')
    ... class Scaled:
    ...     value: float
    ...     unit: str = odc.field(default='m', pytree_node=False)
    >>> optree.tree_flatten(Scaled(2.0), namespace='field-doc')[0]
    [2.0]
    """
    metadata = dict(metadata or {})
    init = kwargs.get("init", True)
    if pytree_node is None:
        pytree_node = True
    if pytree_node and not init:
        raise TypeError("A pytree node field must have init=True (the class is rebuilt through "
                        "__init__); mark init=False fields with pytree_node=False.")
    metadata[_PYTREE_NODE] = pytree_node
    return _dataclasses.field(metadata=metadata, **kwargs)


def _register(cls: type, namespace: str) -> type:
    all_fields = [f for f in _dataclasses.fields(cls)]
    children = tuple(f.name for f in all_fields
                     if f.init and f.metadata.get(_PYTREE_NODE, True))
    meta = tuple(f.name for f in all_fields
                 if f.init and not f.metadata.get(_PYTREE_NODE, True))

    def flatten(obj: Any) -> tuple[tuple[Any, ...], tuple[Any, ...], tuple[str, ...]]:
        return (tuple(getattr(obj, n) for n in children),
                tuple((n, getattr(obj, n)) for n in meta), children)

    def unflatten(metadata: tuple[Any, ...], values: tuple[Any, ...]) -> Any:
        kwargs = dict(zip(children, values))
        kwargs.update(metadata)
        return cls(**kwargs)

    return register_pytree_node(cls, flatten, unflatten, path_entry_type=DataclassEntry,
                                namespace=namespace)


def dataclass(cls: type | None = None, /, *, namespace: str, **kwargs: Any) -> Any:
    """``dataclasses.dataclass`` that also registers the class as a pytree node in
    ``namespace``. Takes the same keywords as ``dataclasses.dataclass``.

    Args:
        cls: The class to decorate (omitted when called with keywords only, as
            ``@dataclass(namespace=...)``).
        namespace: The registry namespace the class is registered in (required: a pytree class is
            scoped like any custom node).
        **kwargs: The keywords of ``dataclasses.dataclass`` (``frozen``, ``order``...);
            ``init=False`` is refused.

    >>> from optree_core import dataclasses as odc
    >>> import optree_core as optree
    >>> @odc.dataclass(namespace='dc-fn-doc', frozen=True)
    ... class Params:
    ...     w: float
    ...     b: float
    >>> optree.tree_map(lambda x: -x, Params(1.0, 2.0), namespace='dc-fn-doc')
    Params(w=-1.0, b=-2.0)
    """
    if cls is None:
        return lambda c: dataclass(c, namespace=namespace, **kwargs)
    if not isinstance(cls, type):
        raise TypeError(f"@dataclass expects a class, got {cls!r}.")
    if kwargs.get("init", True) is False:
        raise TypeError("A pytree dataclass needs init=True to be rebuilt from its fields.")
    return _register(_dataclasses.dataclass(cls, **kwargs), namespace)


def make_dataclass(cls_name: str, fields: Any, *, namespace: str, bases: tuple[type, ...] = (),
                   ns: dict[str, Any] | None = None, module: str | None = None,
                   **kwargs: Any) -> type:
    """``dataclasses.make_dataclass`` that also registers the class as a pytree node.

    Args:
        cls_name: The name of the new class.
        fields: The fields, as for ``dataclasses.make_dataclass``: names, ``(name, type)`` or
            ``(name, type, field(...))`` items.
        namespace: The registry namespace the class is registered in.
        bases: The base classes of the new class.
        ns: Extra attributes of the class body (``namespace`` of ``dataclasses.make_dataclass``,
            renamed since ``namespace`` is the registry's here).
        module: The ``__module__`` of the new class (by default the caller's).
        **kwargs: The other keywords of ``dataclasses.make_dataclass``.

    >>> from optree_core import dataclasses as odc
    >>> import optree_core as optree
    >>> Point = odc.make_dataclass('Point', ['x', 'y'], namespace='mdc-doc')
    >>> optree.tree_leaves(Point(1, 2), namespace='mdc-doc')
    [1, 2]
    """
    if module is None:
        module = sys._getframe(1).f_globals.get("__name__", "__main__")
    cls = _dataclasses.make_dataclass(cls_name, fields, bases=bases, namespace=ns, **kwargs)
    cls.__module__ = module  # what Python 3.12's `module=` does; 3.11 has no such keyword
    return _register(cls, namespace)


_ = Callable  # re-exported names above are the API; keep the import for type readers
