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
from collections import namedtuple
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any, NamedTuple

from optree_core import _C
from optree_core.accessors import ENTRY_CLASSES, AutoEntry, PyTreeEntry
from optree_core.utils import total_order_sorted

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
        _CUSTOM_ENTRIES[ns, cls] = PyTreeNodeRegistryEntry(
            cls, flatten_func, unflatten_func, path_entry_type, _C.PyTreeKind.CUSTOM, ns)
    return cls


# The entry object of each live custom registration, made once so that every lookup returns the
# same object (as optree's registry dict does). The C++ registry decides what is registered; this
# only follows it, and drops an entry when its registration goes (no reference kept).
_CUSTOM_ENTRIES: dict[tuple[str, type], PyTreeNodeRegistryEntry] = {}


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
        entry = _CUSTOM_ENTRIES.pop((ns, cls), None)
    assert found is not None
    return entry or _custom_entry(cls, found)


def _custom_entry(cls: type, found: tuple[Any, ...]) -> PyTreeNodeRegistryEntry:
    """The entry of a custom registration, from ``_C.lookup_node``'s answer."""
    entry = _CUSTOM_ENTRIES.get((found[4], cls))
    if entry is None or entry[1:4] != found[1:4]:
        kind, flatten_func, unflatten_func, path_entry_type, ns = found
        entry = PyTreeNodeRegistryEntry(cls, flatten_func, unflatten_func, path_entry_type,
                                        _C.PyTreeKind(kind), ns)
    return entry


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


class _RegistryView(Mapping):
    """A read-only view of the C++ registry keyed as optree's ``_NODETYPE_REGISTRY``.

    Keys are the registered type (global namespace) or ``(namespace, type)``; two more keys,
    ``collections.namedtuple`` and the struct-sequence marker, stand for the node kinds that are
    recognized by shape rather than registered. The C++ registry stays the one source of truth:
    the view reads it on every access. Built-in kinds get generic flatten/unflatten functions.
    """

    def __iter__(self) -> Iterator[Any]:
        for cls, ns in _C._registry_keys():
            yield cls if ns == "" else (ns, cls)
            if cls is tuple:
                yield from (namedtuple, _structseq_marker())

    def __len__(self) -> int:
        return _C.get_registry_size() + 2

    def __getitem__(self, key: Any) -> PyTreeNodeRegistryEntry:
        ns, cls = key if isinstance(key, tuple) and len(key) == 2 else ("", key)
        if cls is namedtuple or cls is _structseq_marker():
            kind = _C.PyTreeKind.NAMEDTUPLE if cls is namedtuple else _C.PyTreeKind.STRUCTSEQUENCE
        else:
            found = _C.lookup_node(cls, ns) if isinstance(cls, type) else None
            if found is None or found[4] != ns:
                raise KeyError(key)
            kind = _C.PyTreeKind(found[0])
            if kind == _C.PyTreeKind.CUSTOM:
                return _custom_entry(cls, found)
        sorts_keys = kind in (_C.PyTreeKind.DICT, _C.PyTreeKind.DEFAULTDICT)
        return _builtin_entry(cls, kind, sorts_keys and _C.is_dict_insertion_ordered(ns))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self)!r})"


def _structseq_marker() -> Any:
    from optree_core import typing as _typing  # typing imports this module

    return getattr(_typing, "StructSequence", _typing.is_structseq_class)


@functools.cache  # one entry (and one pair of functions) per built-in kind: stable identities
def _builtin_entry(cls: Any, kind: Any, insertion_ordered: bool) -> PyTreeNodeRegistryEntry:
    """The entry of a built-in kind. A dict or defaultdict has two, one per key order: a context
    of ``dict_insertion_ordered`` swaps which one is visible, and each keeps its own order."""
    from optree_core import ops  # ops imports this module

    if kind in (_C.PyTreeKind.DICT, _C.PyTreeKind.DEFAULTDICT):
        def flatten_func(obj: Any) -> tuple[Any, Any, Any]:
            keys = DictMetaData(list(obj) if insertion_ordered else total_order_sorted(obj),
                                original_keys=list(obj), check_keys_consistency=False)
            metadata = keys if kind == _C.PyTreeKind.DICT else (obj.default_factory, keys)
            return tuple(obj[key] for key in keys), metadata, tuple(keys)
    else:
        def flatten_func(obj: Any) -> tuple[Any, Any, Any]:
            children, metadata, entries, _ = ops.tree_flatten_one_level(obj)
            return children, metadata, entries

    entry_type = ENTRY_CLASSES[kind] or PyTreeEntry
    return PyTreeNodeRegistryEntry(cls, flatten_func, ops._builtin_unflatten(kind, cls),
                                   entry_type, kind, "")


_NODETYPE_REGISTRY: Mapping[Any, PyTreeNodeRegistryEntry] = _RegistryView()


def _registry_get(cls: Any = None, /, *,
                  namespace: str = __GLOBAL_NAMESPACE) -> Any:
    """The registration that decides how ``cls`` flattens in ``namespace``, or None for a leaf
    type; without ``cls``, every registration visible there, keyed by type (the namespace's own
    override the global ones). Available as ``register_pytree_node.get``.

        >>> import optree_core as optree
        >>> optree.register_pytree_node.get(dict).kind
        <PyTreeKind.DICT: 5>
        >>> optree.register_pytree_node.get(frozenset) is None  # a leaf
        True
    """
    ns = "" if isinstance(namespace, _GlobalNamespace) else namespace
    if not isinstance(ns, str):
        raise TypeError(f"The namespace must be a string, got {namespace!r}.")
    if cls is None:
        entries = list(_NODETYPE_REGISTRY.values())
        visible = {entry.type: _seen_from(entry, ns) for entry in entries if entry.namespace == ""}
        if ns:
            visible.update((entry.type, entry) for entry in entries if entry.namespace == ns)
        return visible
    if cls is not namedtuple and not isinstance(cls, type):
        raise TypeError(f"Expected a class or None, got {cls!r}.")
    for key in ([(ns, cls)] if ns else []) + [cls]:
        if key in _NODETYPE_REGISTRY:
            return _seen_from(_NODETYPE_REGISTRY[key], ns)
    if _C.is_structseq_class(cls):
        return _NODETYPE_REGISTRY[_structseq_marker()]
    if _C.is_namedtuple_class(cls):
        return _NODETYPE_REGISTRY[namedtuple]
    return None


def _seen_from(entry: PyTreeNodeRegistryEntry, ns: str) -> PyTreeNodeRegistryEntry:
    """A global dict entry as namespace ``ns`` sees it: in the key order that ``ns`` flattens."""
    if entry.kind in (_C.PyTreeKind.DICT, _C.PyTreeKind.DEFAULTDICT):
        return _builtin_entry(entry.type, entry.kind, _C.is_dict_insertion_ordered(ns))
    return entry


register_pytree_node.get = _registry_get  # type: ignore[attr-defined]


_C._set_python_helpers(total_order_sorted)


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

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (_rebuild_dict_metadata, (list(self), list(self.original_keys)))


def _rebuild_dict_metadata(keys: list[Any], original_keys: list[Any]) -> DictMetaData:
    return DictMetaData(keys, original_keys=original_keys, check_keys_consistency=False)


