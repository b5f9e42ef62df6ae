"""optree-core: fast pytree utilities with an optree-compatible API.

    >>> import optree_core as optree
    >>> leaves, spec = optree.tree_flatten({'b': (2, 3), 'a': 1})
    >>> leaves, spec
    ([1, 2, 3], PyTreeSpec({'a': *, 'b': (*, *)}))
    >>> optree.tree_map(lambda x: x + 1, {'b': (2, 3), 'a': 1})
    {'b': (3, 4), 'a': 2}
"""

from optree_core import _C
from optree_core import accessors, dataclasses, functools, integration, ops, registry, typing
from optree_core._C import BUILD_INFO
from optree_core.accessors import (
    AutoEntry,
    DataclassEntry,
    FlattenedEntry,
    GetAttrEntry,
    GetItemEntry,
    MappingEntry,
    NamedTupleEntry,
    PyTreeAccessor,
    PyTreeEntry,
    SequenceEntry,
    StructSequenceEntry,
)
from optree_core.ops import (
    MAX_RECURSION_DEPTH,
    NONE_IS_LEAF,
    NONE_IS_NODE,
    all_leaves,
    broadcast_common,
    broadcast_prefix,
    prefix_errors,
    tree_accessors,
    tree_all,
    tree_any,
    tree_broadcast_common,
    tree_broadcast_map,
    tree_broadcast_map_with_path,
    tree_broadcast_prefix,
    tree_flatten,
    tree_flatten_one_level,
    tree_flatten_with_accessor,
    tree_flatten_with_path,
    tree_is_leaf,
    tree_iter,
    tree_leaves,
    tree_map,
    tree_map_,
    tree_map_with_accessor,
    tree_map_with_accessor_,
    tree_map_with_path,
    tree_map_with_path_,
    tree_max,
    tree_min,
    tree_paths,
    tree_partition,
    tree_reduce,
    tree_replace_nones,
    tree_structure,
    tree_sum,
    tree_transpose,
    tree_transpose_map,
    tree_transpose_map_with_path,
    tree_unflatten,
    treespec_accessors,
    treespec_child,
    treespec_children,
    treespec_defaultdict,
    treespec_deque,
    treespec_dict,
    treespec_entries,
    treespec_entry,
    treespec_from_collection,
    treespec_is_leaf,
    treespec_is_one_level,
    treespec_is_prefix,
    treespec_is_strict_leaf,
    treespec_is_suffix,
    treespec_leaf,
    treespec_list,
    treespec_namedtuple,
    treespec_none,
    treespec_one_level,
    treespec_ordereddict,
    treespec_paths,
    treespec_structseq,
    treespec_transform,
    treespec_tuple,
)
from optree_core.registry import (
    dict_insertion_ordered,
    register_pytree_node,
    register_pytree_node_class,
    unregister_pytree_node,
)
from optree_core.typing import (
    CustomTreeNode,
    FlattenFunc,
    PyTree,
    PyTreeDef,
    PyTreeKind,
    PyTreeSpec,
    PyTreeTypeVar,
    UnflattenFunc,
    is_namedtuple,
    is_namedtuple_class,
    is_namedtuple_instance,
    is_structseq,
    is_structseq_class,
    is_structseq_instance,
    namedtuple_fields,
    structseq_fields,
)
from optree_core.version import __version__

import atexit as _atexit

# The C++ side keeps a few recently flattened specs for reuse; release them while the
# interpreter is still alive.
_atexit.register(_C._clear_structure_cache)

# PyTreeSpec methods written in Python (they need the Python entry classes).
PyTreeSpec.accessors = treespec_accessors  # type: ignore[attr-defined]
PyTreeSpec.transform = treespec_transform  # type: ignore[attr-defined]

__all__ = [
    *ops.__all__,
    "PyTreeEntry",
    "GetAttrEntry",
    "GetItemEntry",
    "FlattenedEntry",
    "AutoEntry",
    "SequenceEntry",
    "MappingEntry",
    "NamedTupleEntry",
    "StructSequenceEntry",
    "DataclassEntry",
    "PyTreeAccessor",
    "register_pytree_node",
    "register_pytree_node_class",
    "unregister_pytree_node",
    "dict_insertion_ordered",
    "PyTreeSpec",
    "PyTreeDef",
    "PyTreeKind",
    "PyTree",
    "PyTreeTypeVar",
    "CustomTreeNode",
    "FlattenFunc",
    "UnflattenFunc",
    "is_namedtuple",
    "is_namedtuple_class",
    "is_namedtuple_instance",
    "namedtuple_fields",
    "is_structseq",
    "is_structseq_class",
    "is_structseq_instance",
    "structseq_fields",
    "BUILD_INFO",
    "__version__",
]
