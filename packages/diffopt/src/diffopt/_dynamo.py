"""torch.compile support: Python twins of optree-core's tree functions that Dynamo can trace.

optree-core does its work in nanobind functions, which Dynamo cannot look inside: every
``tree_flatten`` in a compiled function would be a graph break (and at such a break torch 2.13
calls the nanobind method ``PyTreeSpec.unflatten`` without its ``self``, a TypeError). This
module registers, with :func:`torch.compiler.substitute_in_graph`, a pure-Python implementation
of the tree functions diffopt uses (``tree_flatten``, ``tree_unflatten``, ``tree_leaves``,
``tree_structure``, ``tree_map``, ``tree_is_leaf``) with optree-core's semantics: the same leaf
order (dict keys sorted unless the namespace is insertion-ordered), ``none_is_leaf``, namespaces
and custom nodes. Dynamo traces the twins in place of the originals; eager calls still run the
C++ code, so nothing changes outside torch.compile.

Inside a compiled function a treespec is a :class:`TraceableTreeSpec` (it never leaves the graph
in diffopt's code); treespecs built outside it (optree-core's own) are not accepted there.

The registration waits for ``torch._dynamo`` (importing it costs about a second): it happens when
diffopt is imported if Dynamo already is, else right after the first ``import torch._dynamo``
(which ``torch.compile`` does). optree-core itself never imports torch, so the twins live here.

With them, ``torch.compile(fn, fullgraph=True)`` of a function that calls
``optree_core.tree_map`` (or diffopt's updates) traces into one graph instead of failing.

Example:
    >>> import torch._dynamo  # what torch.compile imports: the twins are registered from then on
    >>> register_dynamo_polyfills()  # so a second registration does nothing
    False
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
import warnings
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable, Iterable
from typing import Any, cast

import optree_core
from optree_core import _C
from optree_core.utils import total_order_sorted

__all__ = ["TraceableTreeSpec", "register_dynamo_polyfills"]

_Kind = _C.PyTreeKind
_LEAF, _NONE, _CUSTOM = int(_Kind.LEAF), int(_Kind.NONE), int(_Kind.CUSTOM)
_TUPLE, _LIST, _NAMEDTUPLE = int(_Kind.TUPLE), int(_Kind.LIST), int(_Kind.NAMEDTUPLE)
_DICT, _ORDEREDDICT, _DEFAULTDICT = int(_Kind.DICT), int(_Kind.ORDEREDDICT), int(_Kind.DEFAULTDICT)
_DEQUE, _STRUCTSEQUENCE = int(_Kind.DEQUE), int(_Kind.STRUCTSEQUENCE)
_DICT_KINDS = (_DICT, _ORDEREDDICT, _DEFAULTDICT)


# --- registry questions, answered at trace time ---------------------------------------------
# Their arguments (a type, a namespace, a tuple of dict keys) are constants while tracing, so
# Dynamo calls them once (``can_constant_fold_through``) and bakes the answer into the graph.


def _node_entry(cls: type, namespace: str) -> tuple[int, Any, Any] | None:
    """``(kind, flatten_func, unflatten_func)`` of the node type ``cls``; ``None`` for a leaf type."""
    found = cast("tuple[Any, Any, Any] | None", _C.lookup_node(cls, namespace))
    if found is not None:
        return int(found[0]), found[1], found[2]
    if _C.is_structseq_class(cls):
        return _STRUCTSEQUENCE, None, None
    if _C.is_namedtuple_class(cls):
        return _NAMEDTUPLE, None, None
    return None


def _dict_keys_in_order(keys: tuple[Any, ...], namespace: str) -> tuple[Any, ...]:
    """A dict's keys in flatten order: sorted, unless the namespace keeps insertion order."""
    if _C.is_dict_insertion_ordered(namespace):
        return keys
    return tuple(total_order_sorted(keys))


# --- the treespec ---------------------------------------------------------------------------


class TraceableTreeSpec:
    """A tree's structure as plain Python objects, what Dynamo builds for a treespec.

    It offers what diffopt uses of :class:`optree_core.PyTreeSpec` (``unflatten``,
    ``flatten_up_to``, ``==``, ``num_leaves``, ``num_nodes``, ``num_children``, ``children()``,
    ``is_leaf()``, ``kind``, ``type``) with the same meanings.

    Example:
        >>> leaves, spec = _tree_flatten({'b': 1, 'a': [2, None]})
        >>> leaves, spec.num_leaves, spec == _tree_flatten({'a': [0, None], 'b': 0})[1]
        ([2, 1], 2, True)
        >>> spec.unflatten([20, 10])
        {'b': 10, 'a': [20, None]}
    """

    def __init__(self, kind: int, node_type: Any, metadata: Any, entries: tuple[Any, ...],
                 children: tuple[TraceableTreeSpec, ...], unflatten_func: Any,
                 original_keys: tuple[Any, ...] | None, none_is_leaf: bool,
                 namespace: str) -> None:
        self._kind = kind
        self.type = node_type
        self._metadata = metadata
        self._entries = entries
        self._children = children
        self._unflatten_func = unflatten_func
        self._original_keys = original_keys  # a dict's own key order, restored by unflatten
        self.none_is_leaf = none_is_leaf
        self.namespace = namespace
        self.num_children = len(children)
        if kind == _LEAF:
            self.num_leaves, self.num_nodes = 1, 1
        else:
            self.num_leaves = sum(child.num_leaves for child in children)
            self.num_nodes = 1 + sum(child.num_nodes for child in children)

    @property
    def kind(self) -> Any:
        return _Kind(self._kind)

    def is_leaf(self, *, strict: bool = True) -> bool:
        if strict:
            return self._kind == _LEAF
        return self.num_nodes == 1 and self.num_leaves <= 1

    def children(self) -> list[TraceableTreeSpec]:
        return list(self._children)

    def child(self, index: int) -> TraceableTreeSpec:
        return self._children[index]

    def entries(self) -> list[Any]:
        return list(self._entries)

    def __len__(self) -> int:
        return self.num_leaves

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TraceableTreeSpec):
            return NotImplemented
        if (self._kind != other._kind or self.type is not other.type
                or self.num_children != other.num_children
                or self.none_is_leaf != other.none_is_leaf):
            return False
        if (self._kind in _DICT_KINDS or self._kind == _CUSTOM) and self._entries != other._entries:
            return False
        # A named tuple's metadata is its type, compared above.
        if self._kind not in (_NAMEDTUPLE, _STRUCTSEQUENCE) and self._metadata != other._metadata:
            return False
        return all(a == b for a, b in zip(self._children, other._children))

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]  # mutable-looking, compared by structure

    def __repr__(self) -> str:
        suffix = ", NoneIsLeaf" if self.none_is_leaf else ""
        if self.namespace and self._has_custom_node():
            suffix += f", namespace={self.namespace!r}"
        return f"PyTreeSpec({self._describe()}{suffix})"

    def _has_custom_node(self) -> bool:
        return self._kind == _CUSTOM or any(child._has_custom_node() for child in self._children)

    def _describe(self) -> str:
        kind = self._kind
        if kind == _LEAF:
            return "*"
        if kind == _NONE:
            return "None"
        inner = [child._describe() for child in self._children]
        if kind == _TUPLE:
            return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"
        if kind == _LIST:
            return "[" + ", ".join(inner) + "]"
        if kind in _DICT_KINDS:
            body = "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(self._entries, inner)) + "}"
            if kind == _DEFAULTDICT:
                return f"defaultdict({self._metadata[0]!r}, {body})"
            return body if kind == _DICT else f"OrderedDict({body})"
        if kind == _DEQUE:
            maxlen = "" if self._metadata is None else f", maxlen={self._metadata}"
            return f"deque([{', '.join(inner)}]{maxlen})"
        if kind in (_NAMEDTUPLE, _STRUCTSEQUENCE):
            fields = self.type._fields if kind == _NAMEDTUPLE else self.type.__match_args__
            name = self.type.__name__ if kind == _NAMEDTUPLE \
                else f"{self.type.__module__}.{self.type.__name__}"
            return f"{name}({', '.join(f'{f}={v}' for f, v in zip(fields, inner))})"
        return f"CustomTreeNode({self.type.__name__}[{self._metadata!r}], [{', '.join(inner)}])"

    def unflatten(self, leaves: Iterable[Any]) -> Any:
        """The tree of this structure holding ``leaves`` (in flatten order)."""
        leaves = list(leaves)
        if len(leaves) != self.num_leaves:
            raise ValueError(f"unflatten: expected {self.num_leaves} leaves for {self}, "
                             f"got {len(leaves)}")
        return self._build(leaves, 0)

    def _build(self, leaves: list[Any], start: int) -> Any:
        if self._kind == _LEAF:
            return leaves[start]
        children = []
        for child in self._children:
            children.append(child._build(leaves, start))
            start += child.num_leaves
        return self._rebuild(children)

    def _rebuild(self, children: list[Any]) -> Any:
        kind = self._kind
        if kind == _NONE:
            return None
        if kind == _TUPLE:
            return tuple(children)
        if kind == _LIST:
            return children
        if kind == _NAMEDTUPLE:
            return self.type(*children)
        if kind == _STRUCTSEQUENCE:
            return self.type(tuple(children))
        if kind == _DEQUE:
            return deque(children, maxlen=self._metadata)
        if kind == _ORDEREDDICT:
            return OrderedDict(zip(self._entries, children))
        if kind in _DICT_KINDS:
            by_key = dict(zip(self._entries, children))
            assert self._original_keys is not None  # a dict node always keeps its own order
            items = [(key, by_key[key]) for key in self._original_keys]
            if kind == _DEFAULTDICT:
                return defaultdict(self._metadata[0], items)
            return dict(items)
        return self._unflatten_func(self._metadata, children)

    def flatten_up_to(self, tree: Any) -> list[Any]:
        """The subtrees of ``tree`` at this structure's leaves (``tree`` must extend it)."""
        subtrees: list[Any] = []
        self._collect(tree, subtrees)
        return subtrees

    def _collect(self, node: Any, subtrees: list[Any]) -> None:
        if self._kind == _LEAF:
            subtrees.append(node)
            return
        if self._kind in _DICT_KINDS and type(node) in (dict, OrderedDict, defaultdict):
            if set(node) != set(self._entries):
                raise ValueError(f"flatten_up_to: expected a mapping with keys "
                                 f"{list(self._entries)}, got keys {list(node)}")
            children = [node[key] for key in self._entries]
        else:
            if type(node) is not self.type:
                raise ValueError(f"flatten_up_to: expected a {self.type!r} node, got "
                                 f"{type(node)!r}")
            children, metadata, _, _, _ = _flatten_one_level(
                node, self.none_is_leaf, self.namespace)
            if len(children) != self.num_children:
                raise ValueError(f"flatten_up_to: a {self.type.__name__} node with "
                                 f"{self.num_children} children was expected, got "
                                 f"{len(children)}")
            if self._kind == _CUSTOM and metadata != self._metadata:
                raise ValueError(f"flatten_up_to: the metadata of a {self.type.__name__} node "
                                 f"differs from the structure's")
        for child, subtree in zip(self._children, children):
            child._collect(subtree, subtrees)


# --- flatten ----------------------------------------------------------------------------------


def _flatten_one_level(node: Any, none_is_leaf: bool, namespace: str) -> tuple[Any, ...]:
    """``(children, metadata, entries, kind, unflatten_func)`` of a node (not a leaf)."""
    node_type = type(node)
    entry = _node_entry(node_type, namespace)
    assert entry is not None  # callers pass nodes, never leaves
    kind, flatten_func, unflatten_func = entry
    if kind == _NONE:
        return [], None, (), kind, None
    if kind in (_TUPLE, _LIST, _NAMEDTUPLE, _STRUCTSEQUENCE, _DEQUE):
        children = list(node)
        metadata = node.maxlen if kind == _DEQUE else (
            node_type if kind in (_NAMEDTUPLE, _STRUCTSEQUENCE) else None)
        return children, metadata, tuple(range(len(children))), kind, None
    if kind in _DICT_KINDS:
        keys = tuple(node) if kind == _ORDEREDDICT else _dict_keys_in_order(tuple(node), namespace)
        children = [node[key] for key in keys]
        metadata = (node.default_factory, list(keys)) if kind == _DEFAULTDICT else list(keys)
        return children, metadata, keys, kind, None
    if kind == _CUSTOM:
        flat = flatten_func(node)
        children = list(flat[0])
        entries = tuple(flat[2]) if len(flat) > 2 and flat[2] is not None \
            else tuple(range(len(children)))
        return children, flat[1], entries, kind, unflatten_func
    raise TypeError(f"torch.compile of an optree-core function: node type {node_type!r} of kind "
                    f"{_Kind(kind)!r} has no traceable implementation in diffopt")


def _is_leaf(node: Any, is_leaf: Callable[[Any], bool] | None, none_is_leaf: bool,
             namespace: str) -> bool:
    if node is None:
        return none_is_leaf or (is_leaf is not None and bool(is_leaf(node)))
    if is_leaf is not None and is_leaf(node):
        return True
    return _node_entry(type(node), namespace) is None


def _flatten_into(node: Any, leaves: list[Any], is_leaf: Callable[[Any], bool] | None,
                  none_is_leaf: bool, namespace: str) -> TraceableTreeSpec:
    if _is_leaf(node, is_leaf, none_is_leaf, namespace):
        leaves.append(node)
        return TraceableTreeSpec(_LEAF, None, None, (), (), None, None, none_is_leaf, namespace)
    children, metadata, entries, kind, unflatten_func = _flatten_one_level(
        node, none_is_leaf, namespace)
    specs = tuple(_flatten_into(child, leaves, is_leaf, none_is_leaf, namespace)
                  for child in children)
    original_keys = tuple(node) if kind in (_DICT, _DEFAULTDICT) else None
    return TraceableTreeSpec(kind, type(node), metadata, entries, specs, unflatten_func,
                             original_keys, none_is_leaf, namespace)


# --- the twins of optree-core's public functions (same signatures) ----------------------------


def _tree_flatten(tree: Any, /, is_leaf: Callable[[Any], bool] | None = None, *,
                  none_is_leaf: bool = False,
                  namespace: str = "") -> tuple[list[Any], TraceableTreeSpec]:
    leaves: list[Any] = []
    spec = _flatten_into(tree, leaves, is_leaf, none_is_leaf, namespace)
    return leaves, spec


def _tree_leaves(tree: Any, /, is_leaf: Callable[[Any], bool] | None = None, *,
                 none_is_leaf: bool = False, namespace: str = "") -> list[Any]:
    return _tree_flatten(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)[0]


def _tree_structure(tree: Any, /, is_leaf: Callable[[Any], bool] | None = None, *,
                    none_is_leaf: bool = False, namespace: str = "") -> TraceableTreeSpec:
    return _tree_flatten(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)[1]


def _tree_unflatten(treespec: Any, leaves: Iterable[Any]) -> Any:
    if not isinstance(treespec, TraceableTreeSpec):
        raise TypeError(
            "tree_unflatten under torch.compile: the treespec must come from a tree_flatten or "
            f"tree_structure in the compiled code itself, got {type(treespec).__name__} (a "
            "treespec built outside the compiled function cannot be traced)")
    return treespec.unflatten(leaves)


def _tree_map(func: Callable[..., Any], tree: Any, /, *rests: Any,
              is_leaf: Callable[[Any], bool] | None = None, none_is_leaf: bool = False,
              namespace: str = "") -> Any:
    leaves, spec = _tree_flatten(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    others = [spec.flatten_up_to(rest) for rest in rests]
    return spec.unflatten([func(*args) for args in zip(leaves, *others)])


def _tree_is_leaf(tree: Any, /, is_leaf: Callable[[Any], bool] | None = None, *,
                  none_is_leaf: bool = False, namespace: str = "") -> bool:
    return _is_leaf(tree, is_leaf, none_is_leaf, namespace)


_TWINS: tuple[tuple[Callable[..., Any], Callable[..., Any]], ...] = (
    (optree_core.tree_flatten, _tree_flatten),
    (optree_core.tree_leaves, _tree_leaves),
    (optree_core.tree_structure, _tree_structure),
    (optree_core.tree_unflatten, _tree_unflatten),
    (optree_core.tree_map, _tree_map),
    (optree_core.tree_is_leaf, _tree_is_leaf),
)


# --- registration -----------------------------------------------------------------------------

_lock = threading.Lock()
_registered = False


def register_dynamo_polyfills() -> bool:
    """Register the twins with Dynamo (once; later calls do nothing).

    Called for you (see the module docstring); imports ``torch._dynamo``.

    Returns:
        ``True`` if this call registered them.
    """
    global _registered
    with _lock:
        if _registered:
            return False
        _registered = True
        from torch.compiler import substitute_in_graph

        # Constant-folded: Dynamo runs the original with the (constant) arguments while tracing.
        substitute_in_graph(_node_entry, can_constant_fold_through=True)(_node_entry)
        substitute_in_graph(_dict_keys_in_order, can_constant_fold_through=True)(
            _dict_keys_in_order)
        refused = []
        for original, twin in _TWINS:
            try:
                substitute_in_graph(original)(twin)
            except ValueError as error:  # another library registered one first: keep the rest
                refused.append(f"{original.__name__} ({error})")
        if refused:
            warnings.warn("diffopt: torch.compile support not registered for "
                          + ", ".join(refused), stacklevel=2)
        return True


def _register_quietly() -> None:
    try:
        register_dynamo_polyfills()
    except Exception as error:  # never break torch's own import over it
        warnings.warn(f"diffopt could not register its torch.compile support for optree-core's "
                      f"tree functions (they will cause graph breaks): {error!r}", stacklevel=2)


class _AfterDynamoImport(importlib.abc.MetaPathFinder):
    """Runs the registration right after ``torch._dynamo`` finishes importing (once)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "torch._dynamo":
            return None
        _remove_hook()
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_register(module: Any) -> None:
            exec_module(module)
            _register_quietly()

        loader.exec_module = exec_then_register
        return spec


_hook = _AfterDynamoImport()


def _remove_hook() -> None:
    if _hook in sys.meta_path:
        sys.meta_path.remove(_hook)


def install() -> None:
    """Register now if Dynamo is loaded, else as soon as it is (what ``import diffopt`` runs)."""
    if "torch._dynamo" in sys.modules:
        _register_quietly()
    elif _hook not in sys.meta_path:
        sys.meta_path.insert(0, _hook)
