"""optree_core's C++ core (use the optree_core package, not this module)."""

import enum


MAX_RECURSION_DEPTH: int = 1000

BUILD_INFO: dict = ...

Py_DEBUG: bool = False

Py_GIL_DISABLED: bool = False

OPTREE_HAS_FROZENDICT: bool = False

OPTREE_HAS_SUBINTERPRETER_SUPPORT: bool = False

PYBIND11_HAS_NATIVE_ENUM: bool = True

PYBIND11_HAS_SUBINTERPRETER_SUPPORT: bool = False

class PyTreeKind(enum.IntEnum):
    """
    The kind of a pytree node: an IntEnum numbered as optree's.

    CUSTOM, LEAF, NONE, TUPLE, LIST, DICT, NAMEDTUPLE, ORDEREDDICT, DEFAULTDICT, DEQUE and
    STRUCTSEQUENCE (FROZENDICT is reserved). PyTreeSpec.kind is the kind of a spec's root.

    >>> import optree_core as optree
    >>> optree.tree_structure([1, (2, 3)]).kind
    <PyTreeKind.LIST: 4>
    >>> [child.kind.name for child in optree.tree_structure([1, (2, 3)]).children()]
    ['LEAF', 'TUPLE']
    """

    CUSTOM = 0

    LEAF = 1

    NONE = 2

    TUPLE = 3

    LIST = 4

    DICT = 5

    NAMEDTUPLE = 6

    ORDEREDDICT = 7

    DEFAULTDICT = 8

    DEQUE = 9

    STRUCTSEQUENCE = 10

    FROZENDICT = 11

    NUM_KINDS: int = 12

class PyTreeSpec:
    """
    The structure of a pytree: its nodes (kinds, keys, types, metadata) without the leaves.

    Immutable, hashable, picklable. Made by tree_flatten / tree_structure or the treespec_*
    constructors; rebuilds trees with unflatten(leaves). num_leaves, num_nodes, children(),
    paths(), entries(), flatten_up_to(tree), compose(inner), is_prefix(other) and the
    comparison operators (a < b: a is a strict prefix of b) describe and relate structures.

    >>> import optree_core as optree
    >>> spec = optree.tree_structure({'a': 1, 'b': (2, 3)})
    >>> spec.num_leaves, spec.num_nodes
    (3, 5)
    >>> spec.unflatten([10, 20, 30])
    {'a': 10, 'b': (20, 30)}
    >>> spec.flatten_up_to({'a': [1], 'b': (2, 3)})
    [[1], 2, 3]
    >>> optree.tree_structure(0) < spec  # a leaf is a prefix of every tree
    True
    """

    def unflatten(self, leaves: object) -> object: ...

    def flatten_up_to(self, tree: object | None) -> list: ...

    def compose(self, inner: PyTreeSpec) -> PyTreeSpec: ...

    def broadcast_to_common_suffix(self, other: PyTreeSpec) -> PyTreeSpec: ...

    def walk(self, leaves: object, f_node: object | None = None, f_leaf: object | None = None) -> object: ...

    def traverse(self, leaves: object, f_node: object | None = None, f_leaf: object | None = None) -> object: ...

    def is_prefix(self, other: PyTreeSpec, *, strict: bool = False) -> bool: ...

    def is_suffix(self, other: PyTreeSpec, *, strict: bool = False) -> bool: ...

    def paths(self) -> list: ...

    def entries(self) -> list: ...

    def entry(self, index: object) -> object: ...

    def children(self) -> list[PyTreeSpec]: ...

    def child(self, index: object) -> PyTreeSpec: ...

    def one_level(self) -> object: ...

    def is_leaf(self, *, strict: bool = True) -> bool: ...

    def is_one_level(self) -> bool: ...

    @property
    def num_leaves(self) -> int: ...

    @property
    def num_nodes(self) -> int: ...

    @property
    def num_children(self) -> int: ...

    @property
    def none_is_leaf(self) -> bool: ...

    @property
    def namespace(self) -> str: ...

    @property
    def kind(self) -> PyTreeKind: ...

    @property
    def type(self) -> object: ...

    def __eq__(self, arg: object | None, /) -> object: ...

    def __ne__(self, arg: object | None, /) -> object: ...

    def __lt__(self, arg: PyTreeSpec, /) -> bool: ...

    def __le__(self, arg: PyTreeSpec, /) -> bool: ...

    def __gt__(self, arg: PyTreeSpec, /) -> bool: ...

    def __ge__(self, arg: PyTreeSpec, /) -> bool: ...

    def __hash__(self) -> int: ...

    def __len__(self) -> int: ...

    def __repr__(self) -> str: ...

    def __reduce__(self) -> tuple: ...

    def __getstate__(self) -> tuple: ...

    def __setstate__(self, state: object) -> None: ...

    def __copy__(self) -> PyTreeSpec: ...

    def __deepcopy__(self, memo: object | None) -> PyTreeSpec: ...

def flatten(tree: object | None, leaf_predicate: object | None = None, none_is_leaf: bool = False, namespace: str = '') -> tuple: ...

def map(func: object, tree: object | None, leaf_predicate: object | None = None, none_is_leaf: bool = False, namespace: str = '') -> object: ...

def flatten_with_path(tree: object | None, leaf_predicate: object | None = None, none_is_leaf: bool = False, namespace: str = '') -> tuple[list, list, PyTreeSpec]: ...

def is_leaf(obj: object | None, leaf_predicate: object | None = None, none_is_leaf: bool = False, namespace: str = '') -> bool: ...

def flatten_one_level(tree: object | None, leaf_predicate: object | None = None, none_is_leaf: bool = False, namespace: str = '') -> tuple: ...

def make_leaf(none_is_leaf: bool = False) -> PyTreeSpec: ...

def make_none(none_is_leaf: bool = False) -> PyTreeSpec: ...

def make_from_collection(collection: object | None, none_is_leaf: bool = False, namespace: str = '') -> PyTreeSpec: ...

def register_node(cls: object, flatten_func: object, unflatten_func: object, path_entry_type: object | None, namespace: str = '') -> None: ...

def unregister_node(cls: object, namespace: str = '') -> None: ...

def lookup_node(cls: object, namespace: str = '') -> object: ...

def is_dict_insertion_ordered(namespace: str = '', inherit_global_namespace: bool = True) -> bool: ...

def set_dict_insertion_ordered(mode: bool, namespace: str = '') -> None: ...

def is_namedtuple_class(arg: object, /) -> bool: ...

def is_structseq_class(arg: object, /) -> bool: ...

def get_registry_size(namespace: str | None = None) -> int: ...
