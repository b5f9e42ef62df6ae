"""Registering field-declaring classes (dataclasses, attrs classes) as pytree nodes: the argument
forms, namespace rules, child/metadata split and all-or-nothing registration that
``dataclasses.register_node`` and ``integrations.attrs.register_node`` share."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from types import MappingProxyType
from typing import Any, NamedTuple

from optree_core.registry import GLOBAL_NAMESPACE, register_pytree_node, unregister_pytree_node

PYTREE_NODE = "pytree_node"  # the field-metadata key that marks a child (True) or metadata (False)


class FieldRecord(NamedTuple):
    """One declared field, as the registration needs it."""

    name: str  # the attribute that holds the value
    keyword: str  # the __init__ parameter that takes it (attrs may alias private names)
    init: bool  # whether __init__ takes it
    field: Any  # the library's own field object (dataclasses.Field, attrs.Attribute)


def check_namespace(namespace: object) -> str:
    """The namespace a field-node helper registers in: '' (and the sentinel) mean the global one."""
    if namespace is GLOBAL_NAMESPACE:
        return GLOBAL_NAMESPACE
    if not isinstance(namespace, str):
        raise TypeError(f"The namespace must be a string, got {namespace!r}.")
    return GLOBAL_NAMESPACE if namespace == "" else namespace


def node_registrar(register: Callable[..., type], cls: Any, namespace: Any) -> Any:
    """Resolve the call forms of a ``register_node`` helper: ``(cls, namespace=...)``, a
    decorator factory ``(namespace=...)``, or the namespace given positionally ``('ns')``."""
    if cls is GLOBAL_NAMESPACE or isinstance(cls, str):
        if namespace is not None:
            raise ValueError("The namespace was given twice: positionally and as namespace=.")
        if cls == "":
            raise ValueError("A positional namespace cannot be empty; pass namespace='' (or the "
                             "GLOBAL_NAMESPACE sentinel) by keyword for the global namespace.")
        cls, namespace = None, cls
    if namespace is None:
        raise ValueError("The namespace is required: register_node(cls, namespace=...).")
    if cls is None:
        return lambda klass, /: register(klass, namespace=namespace)
    return register(cls, namespace=namespace)


def register_field_node(
    cls: type,
    namespace: str,
    *,
    records: Iterable[FieldRecord],
    entry_type: type,
    helper: str,
) -> type:
    """Register ``cls`` with flatten/unflatten functions built from its field records.

    Children are the ``init`` fields whose metadata says ``pytree_node`` (default True); the
    other ``init`` fields travel as metadata; fields ``__init__`` does not take are left out (a
    child must be an ``init`` field). Instances are rebuilt with ``cls(**fields)``. The records
    are kept on the class under ``entry_type._REGISTRATION_ATTRIBUTE``, set only once the
    registration succeeded and rolled back if it cannot be set, so a class is never left half
    registered.
    """
    marker = entry_type._REGISTRATION_ATTRIBUTE
    if marker in cls.__dict__:
        raise TypeError(f"{cls.__name__} is already registered by {helper}; register it in "
                        f"another namespace with optree_core.register_pytree_node and explicit "
                        f"flatten/unflatten functions.")
    namespace = check_namespace(namespace)
    children: dict[str, FieldRecord] = {}
    metadata: dict[str, FieldRecord] = {}
    for record in records:
        if record.field.metadata.get(PYTREE_NODE, True):
            if not record.init:
                raise TypeError(f"Field {record.name!r} of {cls.__name__} is a pytree child but "
                                f"__init__ does not take it; declare it with "
                                f"field(init=False, pytree_node=False).")
            children[record.name] = record
        elif record.init:
            metadata[record.name] = record
    child_names = tuple(children)
    child_keywords = tuple(r.keyword for r in children.values())
    metadata_pairs = tuple((r.name, r.keyword) for r in metadata.values())

    def flatten(obj: Any) -> tuple[tuple[Any, ...], tuple[tuple[str, Any], ...], tuple[str, ...]]:
        values = tuple(getattr(obj, name) for name in child_names)
        return values, tuple((kw, getattr(obj, name)) for name, kw in metadata_pairs), child_names

    def unflatten(meta: tuple[tuple[str, Any], ...], values: Iterable[Any]) -> Any:
        kwargs = dict(zip(child_keywords, values))
        kwargs.update(meta)
        return cls(**kwargs)

    register_pytree_node(cls, flatten, unflatten, path_entry_type=entry_type, namespace=namespace)
    try:
        setattr(cls, marker, (MappingProxyType({n: r.field for n, r in children.items()}),
                              MappingProxyType({n: r.field for n, r in metadata.items()})))
    except BaseException:
        unregister_pytree_node(cls, namespace=namespace)
        raise
    return cls


def warn_custom_init(cls: type, why: str, helper: str) -> None:
    """Warn that ``cls(**fields)`` may not rebuild ``cls``: its ``__init__`` is not generated."""
    warnings.warn(f"{cls.__name__!r} {why}, but {helper} rebuilds instances with "
                  f"cls(**fields): tree_unflatten may fail for it.", UserWarning, stacklevel=3)
