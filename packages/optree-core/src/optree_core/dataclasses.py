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
import inspect as _inspect
import sys as _sys
from dataclasses import (  # noqa: F401 (re-exported: the rest of the dataclasses API)
    KW_ONLY,
    MISSING,
    Field,
    FrozenInstanceError,
    InitVar,
    asdict,
    astuple,
    fields,
    is_dataclass,
    replace,
)
from typing import Any

from optree_core import _field_nodes
from optree_core.accessors import DataclassEntry

__all__ = ["DataclassEntry", "register_node", *_dataclasses.__all__]

_HELPER = "optree_core.dataclasses.register_node"


def field(
    *,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    init: bool = True,
    repr: bool = True,
    hash: bool | None = None,
    compare: bool = True,
    metadata: dict[Any, Any] | None = None,
    kw_only: Any = MISSING,
    doc: str | None = None,
    pytree_node: bool | None = None,
) -> Any:
    """``dataclasses.field`` with ``pytree_node`` saying whether the field is a child (True) or
    metadata (False). Fields with ``init=False`` must say ``pytree_node=False``: they cannot be
    passed back to ``__init__`` when the tree is rebuilt.

    Args:
        default, default_factory, init, repr, hash, compare, kw_only: As for
            ``dataclasses.field``.
        metadata: Extra field metadata, as for ``dataclasses.field``; the ``pytree_node`` flag is
            added to a copy of it.
        doc: The field's docstring (Python 3.14's ``dataclasses.field(doc=...)``; a TypeError on
            older Pythons, as there).
        pytree_node: Whether the field is a child or metadata kept in the treespec; ``None`` (the
            default) reads ``metadata['pytree_node']``, else True.

    Raises:
        TypeError: for ``init=False`` with ``pytree_node`` true, or ``doc`` before Python 3.14.

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
    if pytree_node is None:
        pytree_node = metadata.get(_field_nodes.PYTREE_NODE, True)
    metadata[_field_nodes.PYTREE_NODE] = pytree_node
    if pytree_node and not init:
        raise TypeError("A pytree_node=True field must have init=True (instances are rebuilt "
                        "through __init__); declare it with field(init=False, pytree_node=False).")
    kwargs: dict[str, Any] = {}
    if doc is not None:
        if _sys.version_info < (3, 14):
            raise TypeError("field() got an unexpected keyword argument 'doc' (dataclass fields "
                            "take a docstring from Python 3.14 on).")
        kwargs["doc"] = doc
    return _dataclasses.field(default=default, default_factory=default_factory, init=init,
                              repr=repr, hash=hash, compare=compare, metadata=metadata,
                              kw_only=kw_only, **kwargs)


def dataclass(
    cls: type | None = None,
    /,
    *,
    init: bool = True,
    repr: bool = True,
    eq: bool = True,
    order: bool = False,
    unsafe_hash: bool = False,
    frozen: bool = False,
    match_args: bool = True,
    kw_only: bool = False,
    slots: bool = False,
    weakref_slot: bool = False,
    namespace: str,
) -> Any:
    """``dataclasses.dataclass`` that also registers the class as a pytree node in
    ``namespace`` (see :func:`register_node`).

    Args:
        cls: The class to decorate (omitted when called with keywords only, as
            ``@dataclass(namespace=...)``).
        init, repr, eq, order, unsafe_hash, frozen, match_args, kw_only, slots, weakref_slot: As
            for ``dataclasses.dataclass``.
        namespace: The registry namespace the class is registered in (required: a pytree class is
            scoped like any custom node); ``''`` means the global namespace.

    Raises:
        TypeError: if ``cls`` is not a class, was already decorated by this function, or the
            namespace is not a string.

    >>> from optree_core import dataclasses as odc
    >>> import optree_core as optree
    >>> @odc.dataclass(namespace='dc-fn-doc', frozen=True)
    ... class Params:
    ...     w: float
    ...     b: float
    >>> optree.tree_map(lambda x: -x, Params(1.0, 2.0), namespace='dc-fn-doc')
    Params(w=-1.0, b=-2.0)
    """
    options = {"init": init, "repr": repr, "eq": eq, "order": order, "unsafe_hash": unsafe_hash,
               "frozen": frozen, "match_args": match_args, "kw_only": kw_only, "slots": slots,
               "weakref_slot": weakref_slot}
    if cls is None:
        return lambda klass, /: dataclass(klass, namespace=namespace, **options)
    if not _inspect.isclass(cls):
        raise TypeError(f"@optree_core.dataclasses.dataclass() decorates classes, got {cls!r}.")
    if DataclassEntry._REGISTRATION_ATTRIBUTE in cls.__dict__:
        raise TypeError(f"@optree_core.dataclasses.dataclass() was already applied to "
                        f"{cls.__name__}; it cannot be applied more than once.")
    namespace = _field_nodes.check_namespace(namespace)
    return register_node(_dataclasses.dataclass(cls, **_for_this_python(options)),
                         namespace=namespace)


def make_dataclass(
    cls_name: str,
    fields: Any,  # noqa: F811 (the parameter name dataclasses.make_dataclass uses)
    *,
    bases: tuple[type, ...] = (),
    ns: dict[str, Any] | None = None,
    init: bool = True,
    repr: bool = True,
    eq: bool = True,
    order: bool = False,
    unsafe_hash: bool = False,
    frozen: bool = False,
    match_args: bool = True,
    kw_only: bool = False,
    slots: bool = False,
    weakref_slot: bool = False,
    module: str | None = None,
    decorator: Any = _dataclasses.dataclass,
    namespace: Any,
) -> type:
    """``dataclasses.make_dataclass`` that also registers the class as a pytree node.

    ``namespace`` is the registry namespace here; the class body that
    ``dataclasses.make_dataclass`` calls ``namespace`` is ``ns``. Code written for
    ``dataclasses`` that passes a dict as ``namespace`` and the registry namespace as ``ns``
    is understood too.

    Args:
        cls_name: The name of the new class.
        fields: The fields, as for ``dataclasses.make_dataclass``: names, ``(name, type)`` or
            ``(name, type, field(...))`` items.
        bases: The base classes of the new class.
        ns: Extra attributes of the class body.
        init, repr, eq, order, unsafe_hash, frozen, match_args, kw_only, slots, weakref_slot: As
            for ``dataclasses.dataclass``.
        module: The ``__module__`` of the new class (by default the caller's; accepted on every
            Python, as 3.12's ``make_dataclass`` does).
        decorator: Python 3.14's class decorator hook; only ``dataclasses.dataclass`` (the
            default) before 3.14.
        namespace: The registry namespace the class is registered in.

    >>> from optree_core import dataclasses as odc
    >>> import optree_core as optree
    >>> Point = odc.make_dataclass('Point', ['x', 'y'], namespace='mdc-doc')
    >>> optree.tree_leaves(Point(1, 2), namespace='mdc-doc')
    [1, 2]
    """
    if isinstance(namespace, dict) or namespace is None:
        if not (ns is _field_nodes.GLOBAL_NAMESPACE or isinstance(ns, str)):
            raise TypeError("make_dataclass() missing the registry namespace: pass it as "
                            "namespace= (the class body goes in ns=).")
        ns, namespace = namespace, ns
    namespace = _field_nodes.check_namespace(namespace)
    if decorator is not _dataclasses.dataclass and _sys.version_info < (3, 14):
        raise TypeError("make_dataclass() got an unexpected keyword argument 'decorator' "
                        "(it takes one from Python 3.14 on).")
    if module is None:
        module = _sys._getframe(1).f_globals.get("__name__", "__main__")
    options = {"init": init, "repr": repr, "eq": eq, "order": order, "unsafe_hash": unsafe_hash,
               "frozen": frozen, "match_args": match_args, "kw_only": kw_only, "slots": slots,
               "weakref_slot": weakref_slot}
    options = _for_this_python(options)
    if _sys.version_info >= (3, 14):
        options["decorator"] = decorator
    cls = _dataclasses.make_dataclass(cls_name, fields, bases=bases, namespace=ns, **options)
    cls.__module__ = module  # what Python 3.12's `module=` does, on every version
    return register_node(cls, namespace=namespace)


def _for_this_python(options: dict[str, Any]) -> dict[str, Any]:
    """The stdlib options this Python's dataclasses take: ``weakref_slot`` is new in 3.11, so on
    3.10 it is left out at its default and refused, as the stdlib refuses it, when asked for."""
    if _sys.version_info < (3, 11):  # noqa: UP036 (ruff targets 3.11; the package serves 3.10)
        options = dict(options)
        if options.pop("weakref_slot"):
            raise TypeError("dataclass() got an unexpected keyword argument 'weakref_slot' "
                            "(it takes one from Python 3.11 on).")
    return options


def register_node(cls: Any = None, /, *, namespace: Any = None) -> Any:
    """Register an existing dataclass as a pytree node: its ``init`` fields whose metadata says
    ``pytree_node`` (default True) are children, its other ``init`` fields metadata.

    Instances are rebuilt with ``cls(**fields)``, so ``__init__`` (and ``__post_init__``) runs
    again on unflatten. A class needing anything else is better registered with
    :func:`optree_core.register_pytree_node` and its own functions. Usable as
    ``register_node(cls, namespace=...)``, ``@register_node(namespace=...)`` or
    ``@register_node('namespace')``.

    Args:
        cls: The dataclass, or the namespace string when used as ``@register_node('ns')``.
        namespace: The registry namespace (``''`` for the global one).

    Returns:
        ``cls`` (or a decorator that registers the class it is given).

    Raises:
        TypeError: if ``cls`` is not a dataclass, was registered by this function before, has
            an ``InitVar`` (which ``cls(**fields)`` cannot restore), or has a child field that
            ``__init__`` does not take.
        ValueError: if the namespace is missing or given twice.

    Warns:
        UserWarning: when the dataclass was made with ``init=False`` (its ``__init__`` may not
            take the fields).

    >>> import dataclasses
    >>> import optree_core as optree
    >>> from optree_core import dataclasses as odc
    >>> @odc.register_node(namespace='register-doc')
    ... @dataclasses.dataclass
    ... class Point:
    ...     x: float
    ...     y: float
    >>> optree.tree_map(lambda v: v * 2, Point(1.0, 2.0), namespace='register-doc')
    Point(x=2.0, y=4.0)
    >>> optree.tree_accessors(Point(1.0, 2.0), namespace='register-doc')[1].codify('p')
    'p.y'
    """
    return _field_nodes.node_registrar(_register_dataclass, cls, namespace)


def _register_dataclass(cls: Any, *, namespace: Any) -> type:
    if not _inspect.isclass(cls):
        raise TypeError(f"Expected a dataclass, got {cls!r}.")
    if not _dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass.")
    namespace = _field_nodes.check_namespace(namespace)
    if not cls.__dataclass_params__.init:  # type: ignore[attr-defined]
        _field_nodes.warn_custom_init(cls, "was made with dataclass(init=False)", _HELPER)
    # InitVar pseudo-fields are __init__ parameters that fields() does not list, so
    # cls(**fields) could never pass them back.
    init_vars = [name for name, f in cls.__dataclass_fields__.items()  # type: ignore[attr-defined]
                 if f._field_type is _dataclasses._FIELD_INITVAR]  # type: ignore[attr-defined]
    if init_vars:
        raise TypeError(f"Dataclass {cls.__name__!r} has InitVar field(s) {init_vars!r}, which "
                        f"{_HELPER} cannot pass back to __init__ on unflatten; register it with "
                        f"optree_core.register_pytree_node and explicit functions instead.")
    records = [_field_nodes.FieldRecord(f.name, f.name, f.init, f)
               for f in _dataclasses.fields(cls)]
    return _field_nodes.register_field_node(cls, namespace, records=records,
                                            entry_type=DataclassEntry, helper=_HELPER)
