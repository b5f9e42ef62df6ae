"""attrs classes that are pytree nodes: ``init`` fields marked ``pytree_node`` (the default) are
children, the other ``init`` fields are metadata; the rest of the attrs API is re-exported.

    >>> import optree_core as optree
    >>> from optree_core.integrations import attrs as oattrs
    >>> @oattrs.define(namespace='attrs-doc')
    ... class Linear:
    ...     weight: float
    ...     bias: float
    ...     name: str = oattrs.field(default='fc', pytree_node=False)
    >>> optree.tree_leaves(Linear(1.0, 2.0), namespace='attrs-doc')
    [1.0, 2.0]
    >>> optree.tree_map(lambda x: x * 10, Linear(1.0, 2.0), namespace='attrs-doc')
    Linear(weight=10.0, bias=20.0, name='fc')
"""

from __future__ import annotations

import inspect
from typing import Any

import attrs
from attrs import (  # re-exported: the rest of the attrs API
    NOTHING,
    Attribute,
    Factory,
    asdict,
    astuple,
    cmp_using,
    converters,
    evolve,
    exceptions,
    fields,
    fields_dict,
    filters,
    has,
    resolve_types,
    setters,
    validate,
    validators,
)

from optree_core import _field_nodes
from optree_core.accessors import _FieldRecordEntry

__all__ = [
    "AttrsEntry",
    "field",
    "define",
    "frozen",
    "mutable",
    "make_class",
    "register_node",
    "NOTHING",
    "Attribute",
    "Factory",
    "asdict",
    "astuple",
    "cmp_using",
    "converters",
    "evolve",
    "exceptions",
    "fields",
    "fields_dict",
    "filters",
    "has",
    "resolve_types",
    "setters",
    "validate",
    "validators",
]

_HELPER = "optree_core.integrations.attrs.register_node"


class AttrsEntry(_FieldRecordEntry):
    """A field of an attrs class (the entry is the field name, or its index among the children).

    Args:
        entry: The field name (or the field's index among the pytree fields).
        type: The Python type of the parent node.
        kind: The :class:`PyTreeKind` of the parent node.

    >>> import optree_core as optree
    >>> from optree_core.integrations import attrs as oattrs
    >>> @oattrs.define(namespace='attrs-entry-doc')
    ... class P:
    ...     x: int
    ...     y: int
    >>> entry = optree.tree_accessors(P(1, 2), namespace='attrs-entry-doc')[1][0]
    >>> entry, entry.codify('p')
    (AttrsEntry(field='y', type=<class 'optree_core.integrations.attrs.P'>), 'p.y')
    """

    __slots__ = ()

    _REGISTRATION_ATTRIBUTE = "__optree_attrs_fields__"

    @staticmethod
    def _field_records(node_type: type) -> list[tuple[str, bool]]:
        return [(a.name, a.init) for a in attrs.fields(node_type)]


def field(**kwargs: Any) -> Any:
    """``attrs.field`` with ``pytree_node`` saying whether the field is a child (True) or metadata
    (False); it is stored as ``metadata['pytree_node']``. Fields with ``init=False`` must say
    ``pytree_node=False``: they cannot be passed back to ``__init__`` when the tree is rebuilt.

    Args:
        **kwargs: The keywords of ``attrs.field``, plus ``pytree_node`` (``None``, the default,
            reads ``metadata['pytree_node']``, else True).

    Raises:
        TypeError: for ``init=False`` with ``pytree_node`` true.

    >>> from optree_core.integrations import attrs as oattrs
    >>> oattrs.field(default=0, pytree_node=False).metadata['pytree_node']
    False
    """
    pytree_node = kwargs.pop("pytree_node", None)
    metadata = dict(kwargs.pop("metadata", None) or {})
    if pytree_node is None:
        pytree_node = metadata.get(_field_nodes.PYTREE_NODE, True)
    metadata[_field_nodes.PYTREE_NODE] = pytree_node
    if pytree_node and not kwargs.get("init", True):
        raise TypeError("A pytree_node=True field must have init=True (instances are rebuilt "
                        "through __init__); declare it with field(init=False, pytree_node=False).")
    return attrs.field(metadata=metadata, **kwargs)


def define(cls: type | None = None, /, *, namespace: str, **kwargs: Any) -> Any:
    """``attrs.define`` that also registers the class as a pytree node in ``namespace`` (see
    :func:`register_node`).

    Args:
        cls: The class to decorate (omitted when called with keywords only).
        namespace: The registry namespace (``''`` for the global one).
        **kwargs: The keywords of ``attrs.define``.

    Raises:
        TypeError: if ``cls`` is not a class.

    >>> import optree_core as optree
    >>> from optree_core.integrations import attrs as oattrs
    >>> @oattrs.define(namespace='define-doc')
    ... class Pair:
    ...     a: int
    ...     b: int
    >>> optree.tree_map(lambda v: -v, Pair(1, 2), namespace='define-doc')
    Pair(a=-1, b=-2)
    """
    if cls is None:
        return lambda klass, /: define(klass, namespace=namespace, **kwargs)
    if not inspect.isclass(cls):
        raise TypeError(f"@optree_core.integrations.attrs.define() decorates classes, got {cls!r}.")
    return register_node(attrs.define(cls, **kwargs), namespace=namespace)


mutable = define


def frozen(cls: type | None = None, /, *, namespace: str, **kwargs: Any) -> Any:
    """:func:`define` with ``frozen=True`` (as ``attrs.frozen``).

    Args:
        cls: The class to decorate (omitted when called with keywords only).
        namespace: The registry namespace (``''`` for the global one).
        **kwargs: The keywords of ``attrs.define``.

    >>> import attrs
    >>> from optree_core.integrations import attrs as oattrs
    >>> @oattrs.frozen(namespace='frozen-doc')
    ... class Const:
    ...     value: int
    >>> try:
    ...     Const(1).value = 2
    ... except attrs.exceptions.FrozenInstanceError:
    ...     print('frozen')
    frozen
    """
    kwargs.setdefault("frozen", True)
    kwargs.setdefault("on_setattr", None)
    return define(cls, namespace=namespace, **kwargs)


def make_class(name: str, attrs_: Any, /, *, namespace: str, **kwargs: Any) -> type:
    """``attrs.make_class`` that also registers the new class as a pytree node.

    Args:
        name: The name of the new class.
        attrs_: Its fields: a list of names, or a dict of names to ``field(...)``.
        namespace: The registry namespace (``''`` for the global one).
        **kwargs: The other keywords of ``attrs.make_class``.

    >>> import optree_core as optree
    >>> from optree_core.integrations import attrs as oattrs
    >>> Point = oattrs.make_class('Point', ['x', 'y'], namespace='make-class-doc')
    >>> optree.tree_leaves(Point(1, 2), namespace='make-class-doc')
    [1, 2]
    """
    return register_node(attrs.make_class(name, attrs_, **kwargs), namespace=namespace)


def register_node(cls: Any = None, /, *, namespace: Any = None) -> Any:
    """Register an existing attrs class as a pytree node: its ``init`` fields whose metadata says
    ``pytree_node`` (default True) are children, its other ``init`` fields metadata.

    Instances are rebuilt with ``cls(**fields)`` (by each field's ``__init__`` name, its alias),
    so converters, validators and ``__attrs_post_init__`` run again on unflatten. Usable as
    ``register_node(cls, namespace=...)``, ``@register_node(namespace=...)`` or
    ``@register_node('namespace')``.

    Args:
        cls: The attrs class, or the namespace string when used as ``@register_node('ns')``.
        namespace: The registry namespace (``''`` for the global one).

    Returns:
        ``cls`` (or a decorator that registers the class it is given).

    Raises:
        TypeError: if ``cls`` is not an attrs class, was registered by this function before, or
            has a child field that ``__init__`` does not take.
        ValueError: if the namespace is missing or given twice.

    Warns:
        UserWarning: when attrs did not generate the class's ``__init__`` (``init=False``).

    >>> import attrs
    >>> import optree_core as optree
    >>> from optree_core.integrations import attrs as oattrs
    >>> @oattrs.register_node(namespace='attrs-register-doc')
    ... @attrs.define
    ... class Point:
    ...     x: float
    ...     y: float
    >>> optree.tree_leaves(Point(1.0, 2.0), namespace='attrs-register-doc')
    [1.0, 2.0]
    """
    return _field_nodes.node_registrar(_register_attrs, cls, namespace)


def _register_attrs(cls: Any, *, namespace: Any) -> type:
    if not inspect.isclass(cls):
        raise TypeError(f"Expected an attrs class, got {cls!r}.")
    if not attrs.has(cls):
        raise TypeError(f"{cls!r} is not an attrs class.")
    namespace = _field_nodes.check_namespace(namespace)
    if not getattr(getattr(cls, "__attrs_props__", None), "added_init", True):
        _field_nodes.warn_custom_init(cls, "has no attrs-generated __init__ (init=False)",
                                      _HELPER)
    records = [_field_nodes.FieldRecord(a.name, a.alias or a.name, a.init, a)
               for a in attrs.fields(cls)]
    return _field_nodes.register_field_node(cls, namespace, records=records,
                                            entry_type=AttrsEntry, helper=_HELPER)
