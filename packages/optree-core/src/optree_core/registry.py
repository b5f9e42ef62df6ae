"""Registering custom pytree node types, globally or in a namespace.

    >>> import optree_core as optree
    >>> class Pair:
    ...     def __init__(self, a, b):
    ...         self.a, self.b = a, b
    >>> _ = optree.register_pytree_node(
    ...     Pair,
    ...     lambda p: ((p.a, p.b), None, ('a', 'b')),
    ...     lambda _, children: Pair(*children),
    ...     namespace='doc',
    ... )
    >>> optree.tree_leaves(Pair(1, [2, 3]), namespace='doc')
    [1, 2, 3]
    >>> optree.tree_leaves(Pair(1, [2, 3]))  # other namespaces see a leaf  # doctest: +ELLIPSIS
    [<...Pair object at ...>]
    >>> _ = optree.unregister_pytree_node(Pair, namespace='doc')
"""

from __future__ import annotations

import contextlib
import functools
import operator
import threading
import warnings
from collections.abc import Callable, Generator
from typing import Any, NamedTuple

from optree_core import _C
from optree_core.accessors import AutoEntry, PyTreeEntry

__all__ = [
    "register_pytree_node",
    "register_pytree_node_class",
    "unregister_pytree_node",
    "dict_insertion_ordered",
    "PyTreeNodeRegistryEntry",
    "DictMetaData",
]


class _GlobalNamespace(str):
    """The sentinel that names the global namespace (users pass this, never an empty string)."""

    __slots__ = ()

    def __new__(cls) -> _GlobalNamespace:
        return super().__new__(cls, "")

    def __repr__(self) -> str:
        return "<GLOBAL NAMESPACE>"


__GLOBAL_NAMESPACE: str = _GlobalNamespace()
GLOBAL_NAMESPACE = __GLOBAL_NAMESPACE

# Registration is two steps (the C++ registry and the Python-side record); one lock keeps
# them consistent across threads.
_REGISTRY_LOCK = threading.Lock()


class PyTreeNodeRegistryEntry(NamedTuple):
    """What was registered for a type.

    Args:
        type: The registered class.
        flatten_func: Takes an instance apart: returns ``(children, metadata)`` or ``(children,
            metadata, entries)``.
        unflatten_func: Rebuilds an instance: ``unflatten_func(metadata, children)``.
        path_entry_type: The :class:`PyTreeEntry` subclass that builds the paths of its children.
        kind: The :class:`PyTreeKind` of the node (``CUSTOM`` for user registrations).
        namespace: The namespace of the registration ('' for a global one).

    >>> import optree_core as optree
    >>> class Box:
    ...     def __init__(self, item):
    ...         self.item = item
    >>> _ = optree.register_pytree_node(Box, lambda b: ((b.item,), None),
    ...                                 lambda meta, children: Box(*children),
    ...                                 namespace='entry-doc')
    >>> entry = optree.unregister_pytree_node(Box, namespace='entry-doc')
    >>> entry.type is Box, entry.namespace, entry.kind
    (True, 'entry-doc', <PyTreeKind.CUSTOM: 0>)
    """

    type: type
    flatten_func: Callable[..., Any]
    unflatten_func: Callable[..., Any]
    path_entry_type: type[PyTreeEntry] = AutoEntry
    kind: Any = _C.PyTreeKind.CUSTOM
    namespace: str = ""


def _check_namespace(namespace: object) -> str:
    if namespace is __GLOBAL_NAMESPACE or isinstance(namespace, _GlobalNamespace):
        return ""
    if not isinstance(namespace, str):
        raise TypeError(f"The namespace must be a string, got {namespace!r}.")
    if namespace == "":
        raise ValueError("The namespace cannot be an empty string; use the global namespace "
                         "sentinel optree_core.registry.GLOBAL_NAMESPACE instead.")
    return namespace


def register_pytree_node(
    cls: type,
    /,
    flatten_func: Callable[[Any], Any],
    unflatten_func: Callable[[Any, Any], Any],
    *,
    path_entry_type: type[PyTreeEntry] = AutoEntry,
    namespace: str,
) -> type:
    """Register ``cls`` as a pytree node type.

    Args:
        cls: The class to register (exact type: subclasses are not included).
        flatten_func: ``obj -> (children, metadata)`` or ``(children, metadata, entries)``;
            ``metadata`` must be hashable and comparable, ``entries`` names each child.
        unflatten_func: ``(metadata, children) -> obj``.
        path_entry_type: The :class:`PyTreeEntry` subclass used for accessors.
        namespace: The namespace to register in; ``GLOBAL_NAMESPACE`` for every namespace.

    Returns:
        ``cls`` itself, so this can be used in a decorator.

    Raises:
        ValueError: if ``cls`` is already registered in that namespace, or is built in.

        >>> import optree_core as optree
        >>> class Box:
        ...     def __init__(self, value): self.value = value
        >>> _ = optree.register_pytree_node(Box, lambda b: ((b.value,), None, ('value',)),
        ...                                 lambda _, children: Box(*children), namespace='box')
        >>> optree.tree_leaves([Box(1), Box((2, 3))], namespace='box')
        [1, 2, 3]
        >>> _ = optree.unregister_pytree_node(Box, namespace='box')
    """
    ns = _check_namespace(namespace)
    if not isinstance(cls, type):
        raise TypeError(f"Expected a class, got {cls!r}.")
    if not callable(flatten_func) or not callable(unflatten_func):
        raise TypeError("flatten_func and unflatten_func must be callable.")
    if not (isinstance(path_entry_type, type) and issubclass(path_entry_type, PyTreeEntry)):
        raise TypeError(f"path_entry_type must be a subclass of PyTreeEntry, "
                        f"got {path_entry_type!r}.")
    _warn_if_overriding_a_builtin_kind(cls, ns)
    with _REGISTRY_LOCK:
        _C.register_node(cls, flatten_func, unflatten_func, path_entry_type, ns)
        _NODETYPE_REGISTRY[(ns, cls) if ns else cls] = PyTreeNodeRegistryEntry(
            cls, flatten_func, unflatten_func, path_entry_type, _C.PyTreeKind.CUSTOM, ns)
    return cls


def _warn_if_overriding_a_builtin_kind(cls: type, namespace: str) -> None:
    """Warn that a namedtuple or PyStructSequence class, a node already, gets custom functions.

    Warned before registering (and only for a registration that will be accepted), so a warning
    raised as an error leaves the registry untouched.
    """
    from optree_core.typing import is_namedtuple_class, is_structseq_class

    if is_namedtuple_class(cls):
        family = "collections.namedtuple"
    elif is_structseq_class(cls):
        family = "PyStructSequence"
    else:
        return
    existing = _C.lookup_node(cls, namespace)
    if existing is not None and existing[0] == _C.PyTreeKind.CUSTOM and existing[4] == namespace:
        return  # a duplicate: register_node refuses it, nothing is overridden
    where = f" in namespace {namespace!r}" if namespace else " in the global namespace"
    warnings.warn(f"{cls!r} is a {family} type, a pytree node of its own kind everywhere; this "
                  f"registration replaces its flattening with the given functions{where}.",
                  UserWarning, stacklevel=3)


def register_pytree_node_class(
    cls: type | str | None = None,
    /,
    *,
    path_entry_type: type[PyTreeEntry] | None = None,
    namespace: str | None = None,
) -> Any:
    """Class decorator registering a class that defines ``__tree_flatten__``/``__tree_unflatten__``.

    The older method names ``tree_flatten``/``tree_unflatten`` are accepted too; when a class
    defines both pairs, the dunder pair is used.

    Usable as ``@register_pytree_node_class(namespace='ns')`` or
    ``@register_pytree_node_class('ns')``.

    Args:
        cls: The class (when used without arguments) or the namespace string.
        path_entry_type: Optional :class:`PyTreeEntry` subclass (default: the class's
            ``TREE_PATH_ENTRY_TYPE`` attribute or :class:`AutoEntry`).
        namespace: The namespace to register in.

        >>> import optree_core as optree
        >>> @optree.register_pytree_node_class(namespace='pair')
        ... class Pair:
        ...     def __init__(self, a, b): self.a, self.b = a, b
        ...     def tree_flatten(self): return (self.a, self.b), None
        ...     @classmethod
        ...     def tree_unflatten(cls, metadata, children): return cls(*children)
        >>> optree.tree_map(lambda x: x * 10, Pair(1, 2), namespace='pair').b
        20
        >>> _ = optree.unregister_pytree_node(Pair, namespace='pair')
    """
    if isinstance(cls, str):
        if namespace is not None:
            raise ValueError("Cannot give the namespace both positionally and by keyword.")
        namespace, cls = cls, None
    if cls is None:
        return functools.partial(register_pytree_node_class, path_entry_type=path_entry_type,
                                 namespace=namespace)
    if namespace is None:
        raise ValueError("Must specify the namespace (use GLOBAL_NAMESPACE for all).")
    flatten_name, unflatten_name = _node_protocol(cls)
    if flatten_name != "__tree_flatten__":
        # A class written for the older protocol answers to the current one too, as in optree.
        cls.__tree_flatten__ = cls.__dict__.get(flatten_name, getattr(cls, flatten_name))
        cls.__tree_unflatten__ = cls.__dict__.get(unflatten_name, getattr(cls, unflatten_name))
    entry_type = path_entry_type or getattr(cls, "TREE_PATH_ENTRY_TYPE", AutoEntry)
    register_pytree_node(cls, operator.methodcaller(flatten_name), getattr(cls, unflatten_name),
                         path_entry_type=entry_type, namespace=namespace)
    return cls


# The method pairs a class registered with register_pytree_node_class may define, preferred first:
# the dunder protocol of optree >= 0.18, then the older plain names (still common in user code).
_NODE_PROTOCOLS = (("__tree_flatten__", "__tree_unflatten__"), ("tree_flatten", "tree_unflatten"))


def _node_protocol(cls: type) -> tuple[str, str]:
    """The (flatten, unflatten) method names ``cls`` implements, or a TypeError naming both."""
    for flatten_name, unflatten_name in _NODE_PROTOCOLS:
        if callable(getattr(cls, flatten_name, None)) and callable(getattr(cls, unflatten_name, None)):
            return flatten_name, unflatten_name
    raise TypeError(f"{cls!r} cannot be registered with register_pytree_node_class: it must define "
                    f"__tree_flatten__ and __tree_unflatten__ (or tree_flatten and tree_unflatten).")


def unregister_pytree_node(cls: type, /, *, namespace: str) -> PyTreeNodeRegistryEntry:
    """Remove the registration of ``cls`` in ``namespace``.

    Args:
        cls: The class whose registration to remove.
        namespace: The namespace it was registered in (required, as for registering).

    Returns:
        The removed registration.

    Raises:
        ValueError: if ``cls`` is not registered there, or is a built-in node type.

        >>> import optree_core as optree
        >>> class Leafy: pass
        >>> _ = optree.register_pytree_node(Leafy, lambda x: ((), None), lambda m, c: Leafy(),
        ...                                 namespace='tmp')
        >>> optree.unregister_pytree_node(Leafy, namespace='tmp').namespace
        'tmp'
        >>> optree.tree_leaves(Leafy(), namespace='tmp') != []   # a leaf again
        True
    """
    ns = _check_namespace(namespace)
    with _REGISTRY_LOCK:
        found = _C.lookup_node(cls, ns)
        if found is not None and found[4] != ns:
            found = None  # Visible only through the global namespace.
        _C.unregister_node(cls, ns)
        _NODETYPE_REGISTRY.pop((ns, cls) if ns else cls, None)
    assert found is not None
    kind, flatten_func, unflatten_func, path_entry_type, _ = found
    return PyTreeNodeRegistryEntry(cls, flatten_func, unflatten_func, path_entry_type,
                                   _C.PyTreeKind(kind), ns)


@contextlib.contextmanager
def dict_insertion_ordered(mode: bool, /, *, namespace: str) -> Generator[None, None, None]:
    """Flatten plain dicts (and defaultdicts) in insertion order instead of sorted-key order.

    Args:
        mode: Whether to keep insertion order inside the context.
        namespace: The namespace it applies to (``GLOBAL_NAMESPACE``: every namespace).

        >>> import optree_core as optree
        >>> from optree_core.registry import GLOBAL_NAMESPACE
        >>> with optree.dict_insertion_ordered(True, namespace=GLOBAL_NAMESPACE):
        ...     optree.tree_leaves({'b': 1, 'a': 2})
        [1, 2]
        >>> optree.tree_leaves({'b': 1, 'a': 2})
        [2, 1]
    """
    ns = _check_namespace(namespace)
    with _REGISTRY_LOCK:
        # (_C answers False for '' when asked not to inherit, so the global one is asked plainly.)
        previous = (_C.is_dict_insertion_ordered(ns, inherit_global_namespace=False) if ns
                    else _C.is_dict_insertion_ordered(""))
        _C.set_dict_insertion_ordered(bool(mode), ns)
    try:
        yield
    finally:
        with _REGISTRY_LOCK:
            _C.set_dict_insertion_ordered(previous, ns)


def _total_order_sorted(keys: list[Any]) -> list[Any]:
    """Sort keys that do not compare with each other (mixed types): by type, then value;
    if even that fails, keep insertion order."""
    try:
        return sorted(keys, key=lambda k: (f"{type(k).__module__}.{type(k).__qualname__}", k))
    except TypeError:
        return list(keys)


_C._set_python_helpers(_total_order_sorted)


class DictMetaData(list):
    """The keys of a dict node in traversal order (sorted, or insertion order under
    :func:`dict_insertion_ordered`), with ``original_keys``: the dict's own key order, which
    unflattening restores. A plain list otherwise (indexing, iteration, equality).

    Args:
        keys: The keys in traversal order.
        original_keys: The keys in the dict's insertion order (default: ``keys``' order).
        check_keys_consistency: Whether to check that both hold the same keys.

    Raises:
        ValueError: if ``original_keys`` has another length or (when checked) other keys.

    >>> from optree_core.registry import DictMetaData
    >>> meta = DictMetaData(['a', 'b'], original_keys=['b', 'a'])
    >>> meta == ['a', 'b'], list(meta.original_keys)
    (True, ['b', 'a'])
    """

    __slots__ = ("original_keys",)

    def __init__(self, keys: Any = (), /, *, original_keys: Any = None,
                 check_keys_consistency: bool = True) -> None:
        super().__init__(keys)
        self.original_keys = dict.fromkeys(self if original_keys is None else original_keys)
        if len(self.original_keys) != len(self):
            raise ValueError(f"original_keys holds {len(self.original_keys)} distinct keys but keys "
                             f"holds {len(self)}.")
        if check_keys_consistency and set(self.original_keys) != set(self):
            raise ValueError(f"original_keys {list(self.original_keys)!r} and keys {list(self)!r} "
                             f"are not the same keys.")

    def __getnewargs_ex__(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (list(self),), {"original_keys": list(self.original_keys),
                               "check_keys_consistency": False}

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (_rebuild_dict_metadata, (list(self), list(self.original_keys)))


def _rebuild_dict_metadata(keys: list[Any], original_keys: list[Any]) -> DictMetaData:
    return DictMetaData(keys, original_keys=original_keys, check_keys_consistency=False)


def _builtin_registry(insertion_ordered: bool = False) -> dict[Any, PyTreeNodeRegistryEntry]:
    """The registrations optree_core starts with, described for ``register_pytree_node.get``
    (with ``insertion_ordered``: as they are under :func:`dict_insertion_ordered`)."""
    from collections import OrderedDict, defaultdict, deque, namedtuple

    from optree_core.accessors import (
        MappingEntry,
        NamedTupleEntry,
        SequenceEntry,
        StructSequenceEntry,
    )
    from optree_core.typing import StructSequence

    def sorted_keys(mapping: Any) -> list[Any]:
        return list(mapping) if insertion_ordered else _total_order_sorted(list(mapping))

    def mapping_flatten(mapping: Any) -> tuple[tuple[Any, ...], DictMetaData, list[Any]]:
        keys = sorted_keys(mapping)
        return tuple(mapping[k] for k in keys), DictMetaData(keys, original_keys=list(mapping)), keys

    def rebuild(factory: Callable[[Any], Any]) -> Callable[[Any, Any], Any]:
        def unflatten(keys: Any, values: Any) -> Any:
            items = dict(zip(keys, values))
            order = getattr(keys, "original_keys", keys)
            return factory([(k, items[k]) for k in order])
        return unflatten

    def ordered_flatten(mapping: Any) -> tuple[tuple[Any, ...], list[Any], list[Any]]:
        return tuple(mapping.values()), list(mapping), list(mapping)

    def defaultdict_flatten(mapping: Any) -> tuple[tuple[Any, ...], tuple[Any, Any], list[Any]]:
        values, keys, entries = mapping_flatten(mapping)
        return values, (mapping.default_factory, keys), entries

    def defaultdict_unflatten(metadata: Any, values: Any) -> Any:
        factory, keys = metadata
        return defaultdict(factory, rebuild(dict)(keys, values))

    K = _C.PyTreeKind
    rows = [
        (type(None), lambda _: ((), None), lambda _m, _c: None, PyTreeEntry, K.NONE),
        (tuple, lambda t: (t, None), lambda _m, c: tuple(c), SequenceEntry, K.TUPLE),
        (list, lambda seq: (seq, None), lambda _m, c: list(c), SequenceEntry, K.LIST),
        (dict, mapping_flatten, rebuild(dict), MappingEntry, K.DICT),
        (namedtuple, lambda t: (t, type(t)), lambda cls, c: cls(*c), NamedTupleEntry,
         K.NAMEDTUPLE),
        (OrderedDict, ordered_flatten, rebuild(OrderedDict), MappingEntry, K.ORDEREDDICT),
        (defaultdict, defaultdict_flatten, defaultdict_unflatten, MappingEntry, K.DEFAULTDICT),
        (deque, lambda d: (d, d.maxlen), lambda maxlen, c: deque(c, maxlen=maxlen), SequenceEntry,
         K.DEQUE),
        (StructSequence, lambda s: (s, type(s)), lambda cls, c: cls(c), StructSequenceEntry,
         K.STRUCTSEQUENCE),
    ]
    return {row[0]: PyTreeNodeRegistryEntry(*row) for row in rows}


# Every registration, as optree keys them: the type for global ones, (namespace, type) for the
# others. The C++ registry is what flattening reads; this record answers register_pytree_node.get.
_NODETYPE_REGISTRY: dict[Any, PyTreeNodeRegistryEntry] = _builtin_registry()
_INSERTION_ORDERED_DICT_ENTRIES = {t: e for t, e in _builtin_registry(True).items()
                                   if e.kind in (_C.PyTreeKind.DICT, _C.PyTreeKind.DEFAULTDICT)}


def pytree_node_registry_get(cls: Any = None, /, *, namespace: str = "") -> Any:
    """The registration that applies to ``cls`` in ``namespace`` (``None`` for a leaf type), or,
    without ``cls``, every registration visible there (global ones overridden by the namespace's).

    Reached as ``register_pytree_node.get``.

    Args:
        cls: The type to look up (``collections.namedtuple`` stands for all namedtuple classes),
            or ``None`` for all.
        namespace: The namespace to look in ('' or the sentinel for the global one).

    Raises:
        TypeError: if ``cls`` is not a class or the namespace not a string.

    >>> import optree_core as optree
    >>> optree.register_pytree_node.get(list).kind
    <PyTreeKind.LIST: 4>
    >>> optree.register_pytree_node.get(frozenset) is None  # a leaf type
    True
    """
    from collections import namedtuple

    from optree_core.typing import StructSequence, is_namedtuple_class, is_structseq_class

    if namespace is __GLOBAL_NAMESPACE:
        namespace = ""
    if cls is not None and cls is not namedtuple and not isinstance(cls, type):
        raise TypeError(f"Expected a class or None, got {cls!r}.")
    if not isinstance(namespace, str):
        raise TypeError(f"The namespace must be a string, got {namespace!r}.")
    with _REGISTRY_LOCK:
        entries = list(_NODETYPE_REGISTRY.values())
    if _C.is_dict_insertion_ordered(namespace):
        entries = [_INSERTION_ORDERED_DICT_ENTRIES.get(e.type, e) if e.namespace == "" else e
                   for e in entries]
    if cls is None:
        found = {e.type: e for e in entries if e.namespace == ""}
        found.update((e.type, e) for e in entries if namespace and e.namespace == namespace)
        return found
    for e in entries:
        if namespace and e.namespace == namespace and e.type is cls:
            return e
    for e in entries:
        if e.namespace == "" and e.type is cls:
            return e
    if is_structseq_class(cls):
        return _NODETYPE_REGISTRY.get(StructSequence)
    if is_namedtuple_class(cls):
        return _NODETYPE_REGISTRY.get(namedtuple)
    return None


register_pytree_node.get = pytree_node_registry_get  # type: ignore[attr-defined]
