"""Path entries and accessors: how a leaf is reached from the root of its tree.

An accessor is a tuple of entries; calling it on a tree fetches the leaf::

    >>> import optree_core as optree
    >>> accessor = optree.tree_accessors({'a': [1, 2]})[1]
    >>> accessor
    PyTreeAccessor(*['a'][1], (MappingEntry(key='a', type=<class 'dict'>), SequenceEntry(index=1, type=<class 'list'>)))
    >>> accessor({'a': [1, 2]})
    2
    >>> accessor.codify('tree')
    "tree['a'][1]"
"""

from __future__ import annotations

import dataclasses
from typing import Any

from optree_core._C import PyTreeKind

__all__ = [
    "PyTreeEntry",
    "GetItemEntry",
    "GetAttrEntry",
    "FlattenedEntry",
    "AutoEntry",
    "SequenceEntry",
    "MappingEntry",
    "NamedTupleEntry",
    "StructSequenceEntry",
    "DataclassEntry",
    "PyTreeAccessor",
]


class PyTreeEntry:
    """One step of a path: the child ``entry`` of a node of type ``type`` and kind ``kind``.

    Args:
        entry: The index, key, field name or custom entry that selects the child.
        type: The Python type of the parent node.
        kind: The :class:`PyTreeKind` of the parent node.

    >>> from optree_core import MappingEntry, PyTreeKind
    >>> entry = MappingEntry('w', dict, PyTreeKind.DICT)
    >>> entry({'w': 3}), entry.codify('params')
    (3, "params['w']")
    """

    __slots__ = ("entry", "kind", "type")

    def __init__(self, entry: Any, type: type, kind: PyTreeKind) -> None:
        if kind == PyTreeKind.LEAF:
            raise ValueError("Cannot create a path entry for a leaf.")
        if kind == PyTreeKind.NONE:
            raise ValueError("Cannot create a path entry for None (it has no children).")
        object.__setattr__(self, "entry", entry)
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "kind", kind)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{self.__class__.__name__} is immutable.")

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.entry, self.type, self.kind))

    def __call__(self, obj: Any) -> Any:
        """Fetch the child of ``obj`` this entry selects (by item access, unless overridden)."""
        try:
            return obj[self.entry]
        except TypeError as exc:
            raise TypeError(f"{self.__class__!r} cannot fetch entry {self.entry!r} of {obj!r}: "
                            f"the object does not support item access.") from exc

    def codify(self, node: str = "") -> str:
        """Python source that fetches the child from the expression ``node``."""
        return f"{node}[<flat index {self.entry!r}>]"

    def __add__(self, other: object) -> PyTreeAccessor:
        if isinstance(other, PyTreeEntry):
            return PyTreeAccessor((self, other))
        if isinstance(other, PyTreeAccessor):
            return PyTreeAccessor((self, *other))
        return NotImplemented

    def _identity(self) -> tuple[Any, ...]:
        # Two entries are equal when they select the same child the same way: a subclass that
        # only renames or documents (keeps __call__ and codify) equals its base.
        cls = self.__class__
        return (self.entry, self.type, self.kind, cls.__call__, cls.codify)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PyTreeEntry) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(entry={self.entry!r}, type={self.type!r})"


class GetItemEntry(PyTreeEntry):
    """An entry fetched with ``obj[entry]``.

    Args:
        entry: The index or key that ``parent[entry]`` looks up.
        type: The Python type of the parent node.
        kind: The :class:`PyTreeKind` of the parent node.

    >>> from optree_core import GetItemEntry, PyTreeKind
    >>> GetItemEntry(1, list, PyTreeKind.LIST)([10, 20])
    20
    """

    __slots__ = ()

    def __call__(self, obj: Any) -> Any:
        return obj[self.entry]

    def codify(self, node: str = "") -> str:
        return f"{node}[{self.entry!r}]"


class GetAttrEntry(PyTreeEntry):
    """An entry fetched with ``getattr(obj, entry)``.

    Args:
        entry: The name of the attribute that holds the child.
        type: The Python type of the parent node.
        kind: The :class:`PyTreeKind` of the parent node.

    >>> import types
    >>> from optree_core import GetAttrEntry, PyTreeKind
    >>> GetAttrEntry('x', object, PyTreeKind.CUSTOM)(types.SimpleNamespace(x=5))
    5
    """

    __slots__ = ()

    @property
    def name(self) -> str:
        return self.entry

    def __call__(self, obj: Any) -> Any:
        # A dotted name walks nested attributes ('a.b' is obj.a.b).
        for part in self.name.split("."):
            obj = getattr(obj, part)
        return obj

    def codify(self, node: str = "") -> str:
        for part in self.name.split("."):
            node = f"{node}.{part}" if part.isidentifier() else f"getattr({node}, {part!r})"
        return node

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(name={self.name!r}, type={self.type!r})"


class FlattenedEntry(PyTreeEntry):
    """An entry of a custom node that has no way to fetch the child back.

    Args:
        entry: The entry the custom node's flatten function gave for the child.
        type: The Python type of the parent node.
        kind: The :class:`PyTreeKind` of the parent node.

    >>> from optree_core import FlattenedEntry, PyTreeKind
    >>> FlattenedEntry(0, object, PyTreeKind.CUSTOM).codify('t')
    't[<flat index 0>]'
    """

    __slots__ = ()


class AutoEntry(PyTreeEntry):
    """Picks the entry class for the children of a custom node from its type: the field entry of a
    PyStructSequence, namedtuple or dataclass, item access for mappings and sequences, a
    flattened entry otherwise.

    Args:
        entry: The entry the custom node's flatten function gave for the child.
        type: The Python type of the parent node.
        kind: The :class:`PyTreeKind` of the parent node.

    >>> from optree_core import AutoEntry, PyTreeKind
    >>> type(AutoEntry(0, list, PyTreeKind.CUSTOM)).__name__
    'SequenceEntry'
    """

    __slots__ = ()

    def __new__(cls, entry: Any, type: type, kind: PyTreeKind) -> PyTreeEntry:
        if cls is not AutoEntry:
            return super().__new__(cls)
        if kind != PyTreeKind.CUSTOM:
            raise ValueError(f"AutoEntry picks entries for custom nodes only, got kind {kind!r}.")
        return _auto_entry_class(type)(entry, type, kind)


def _auto_entry_class(node_type: type) -> type[PyTreeEntry]:
    """The entry class AutoEntry stands for, for children of a custom node of ``node_type``."""
    from collections.abc import Mapping, Sequence

    from optree_core.typing import is_namedtuple_class, is_structseq_class

    if is_structseq_class(node_type):
        return StructSequenceEntry
    if is_namedtuple_class(node_type):
        return NamedTupleEntry
    if dataclasses.is_dataclass(node_type):
        return DataclassEntry
    if issubclass(node_type, Mapping):
        return MappingEntry
    if issubclass(node_type, Sequence):
        return SequenceEntry
    return FlattenedEntry


class SequenceEntry(GetItemEntry):
    """The ``index``-th child of a tuple, list or deque.

    Args:
        entry: The index of the child in the sequence.
        type: The Python type of the parent node.
        kind: The :class:`PyTreeKind` of the parent node.

    >>> import optree_core as optree
    >>> optree.tree_accessors((1, 2))[1][0]
    SequenceEntry(index=1, type=<class 'tuple'>)
    """

    __slots__ = ()

    @property
    def index(self) -> int:
        return self.entry

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(index={self.index!r}, type={self.type!r})"


class MappingEntry(GetItemEntry):
    """The child under ``key`` of a dict, OrderedDict or defaultdict.

    Args:
        entry: The key of the child in the mapping.
        type: The Python type of the parent node.
        kind: The :class:`PyTreeKind` of the parent node.

    >>> import optree_core as optree
    >>> optree.tree_accessors({'k': 1})[0][0].key
    'k'
    """

    __slots__ = ()

    @property
    def key(self) -> Any:
        return self.entry

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(key={self.key!r}, type={self.type!r})"


class NamedTupleEntry(SequenceEntry):
    """A field of a namedtuple (the entry is its index; ``field`` is its name).

    Args:
        entry: The index of the field (its name is read from ``type``).
        type: The Python type of the parent node.
        kind: The :class:`PyTreeKind` of the parent node.

    >>> from collections import namedtuple
    >>> import optree_core as optree
    >>> P = namedtuple('P', 'x y')
    >>> optree.tree_accessors(P(1, 2))[1].codify('p')
    'p.y'
    """

    __slots__ = ()

    @property
    def fields(self) -> tuple[str, ...]:
        """The field names of the namedtuple type."""
        from optree_core.typing import namedtuple_fields

        return namedtuple_fields(self.type)

    @property
    def field(self) -> str:
        return self.fields[self.entry]

    def codify(self, node: str = "") -> str:
        return f"{node}.{self.field}"

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(field={self.field!r}, type={self.type!r})"


class StructSequenceEntry(SequenceEntry):
    """A field of a PyStructSequence such as ``time.struct_time``.

    Args:
        entry: The index of the field (its name is read from ``type``).
        type: The Python type of the parent node.
        kind: The :class:`PyTreeKind` of the parent node.

    >>> import time
    >>> import optree_core as optree
    >>> optree.tree_accessors(time.gmtime(0))[0][0].field
    'tm_year'
    """

    __slots__ = ()

    @property
    def fields(self) -> tuple[str, ...]:
        """The sequence field names of the type (unnamed slots as ``PyStructSequence_UnnamedField``)."""
        from optree_core.typing import structseq_fields

        return structseq_fields(self.type)

    @property
    def field(self) -> str:
        return self.fields[self.entry]

    @property
    def is_unnamed(self) -> bool:
        """Whether the slot has no field name (``os.stat_result`` has such slots): it is then
        fetched and printed by index."""
        from optree_core.typing import PyStructSequence_UnnamedField

        return self.field == PyStructSequence_UnnamedField

    def __call__(self, obj: Any) -> Any:
        return obj[self.entry] if self.is_unnamed else getattr(obj, self.field)

    def codify(self, node: str = "") -> str:
        return f"{node}[{self.entry!r}]" if self.is_unnamed else f"{node}.{self.field}"

    def __repr__(self) -> str:
        if self.is_unnamed:
            return f"{self.__class__.__name__}(entry={self.entry!r}, type={self.type!r})"
        return f"{self.__class__.__name__}(field={self.field!r}, type={self.type!r})"


class _FieldRecordEntry(GetAttrEntry):
    """Base of the entries of field-declaring classes (dataclasses, attrs classes).

    The entry is a field name, or an integer counting through the children the class's
    registration recorded. Subclasses say how to list the fields of a class and which class
    attribute their ``register_node`` records the children in.

    Args:
        entry: The field name (or the child's index among the recorded children).
        type: The Python type of the parent node.
        kind: The :class:`PyTreeKind` of the parent node.

    >>> from optree_core import DataclassEntry, PyTreeKind
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class P:
    ...     x: int
    ...     y: int
    >>> DataclassEntry(1, P, PyTreeKind.CUSTOM).field
    'y'
    """

    __slots__ = ()

    _REGISTRATION_ATTRIBUTE = ""

    @staticmethod
    def _field_records(node_type: type) -> list[tuple[str, bool]]:
        """``(name, init)`` for every field of ``node_type``, in declaration order."""
        raise NotImplementedError

    @property
    def fields(self) -> tuple[str, ...]:
        """The names of all fields of the class, in declaration order."""
        return tuple(name for name, _ in self._field_records(self.type))

    @property
    def init_fields(self) -> tuple[str, ...]:
        """The names of the fields ``__init__`` takes."""
        return tuple(name for name, init in self._field_records(self.type) if init)

    @property
    def children_fields(self) -> tuple[str, ...]:
        """The fields an integer entry counts through: the children recorded by ``register_node``
        on the class itself (a subclass inherits the attribute, not the registration), else all
        fields in declaration order."""
        registration = self.type.__dict__.get(self._REGISTRATION_ATTRIBUTE)
        return self.fields if registration is None else tuple(registration[0])

    @property
    def field(self) -> str:
        if isinstance(self.entry, int):
            return self.children_fields[self.entry]
        return self.entry

    @property
    def name(self) -> str:
        return self.field

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(field={self.field!r}, type={self.type!r})"


class DataclassEntry(_FieldRecordEntry):
    """A field of a dataclass (the entry is the field name, or its index among the children).

    Args:
        entry: The field name (or the field's index among the pytree fields).
        type: The Python type of the parent node.
        kind: The :class:`PyTreeKind` of the parent node.

    >>> from optree_core import dataclasses as odc
    >>> import optree_core as optree
    >>> @odc.dataclass(namespace='dc-doc')
    ... class P:
    ...     x: int
    >>> entry = optree.tree_accessors(P(1), namespace='dc-doc')[0][0]
    >>> entry.codify('p'), entry.fields
    ('p.x', ('x',))
    """

    __slots__ = ()

    _REGISTRATION_ATTRIBUTE = "__optree_dataclass_fields__"

    @staticmethod
    def _field_records(node_type: type) -> list[tuple[str, bool]]:
        return [(f.name, f.init) for f in dataclasses.fields(node_type)]


class PyTreeAccessor(tuple):
    """A path from the root of a tree to one of its leaves, as a tuple of entries.

    Args:
        path: The entries, outermost first.

    >>> import optree_core as optree
    >>> accessor = optree.tree_accessors({'a': [1, 2]})[1]
    >>> accessor({'a': [7, 8]}), accessor.path
    (8, ('a', 1))
    """

    __slots__ = ()

    def __new__(cls, path: tuple[PyTreeEntry, ...] | list[PyTreeEntry] = ()) -> PyTreeAccessor:
        path = tuple(path)
        if not all(isinstance(p, PyTreeEntry) for p in path):
            raise TypeError(f"Expected a sequence of PyTreeEntry, got {path!r}.")
        return super().__new__(cls, path)

    @property
    def path(self) -> tuple[Any, ...]:
        """The raw entries (keys and indices) of the path."""
        return tuple(e.entry for e in self)

    def __call__(self, obj: Any) -> Any:
        for entry in self:
            obj = entry(obj)
        return obj

    def __getitem__(self, index):  # type: ignore[override]
        item = super().__getitem__(index)
        return self.__class__(item) if isinstance(index, slice) else item

    def __add__(self, other: object) -> PyTreeAccessor:
        if isinstance(other, PyTreeEntry):
            return self.__class__((*self, other))
        if isinstance(other, PyTreeAccessor):
            return self.__class__((*self, *other))
        return NotImplemented

    def __mul__(self, n: int) -> PyTreeAccessor:  # type: ignore[override]
        return self.__class__(super().__mul__(n))

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PyTreeAccessor) and super().__eq__(other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return super().__hash__()

    def codify(self, root: str = "*") -> str:
        """Python source that fetches the leaf from the expression ``root``."""
        out = root
        for entry in self:
            out = entry.codify(out)
        return out

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.codify()}, {tuple(self)!r})"


# Entry class by PyTreeKind value (custom nodes use their registered class instead).
ENTRY_CLASSES = (
    AutoEntry,            # CUSTOM
    None,                 # LEAF
    None,                 # NONE
    SequenceEntry,        # TUPLE
    SequenceEntry,        # LIST
    MappingEntry,         # DICT
    NamedTupleEntry,      # NAMEDTUPLE
    MappingEntry,         # ORDEREDDICT
    MappingEntry,         # DEFAULTDICT
    SequenceEntry,        # DEQUE
    StructSequenceEntry,  # STRUCTSEQUENCE
    MappingEntry,         # FROZENDICT
)
KINDS = tuple(PyTreeKind(i) for i in range(len(ENTRY_CLASSES)))
