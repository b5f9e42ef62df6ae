"""Type aliases and structural type checks (namedtuple, PyStructSequence).

    >>> from collections import namedtuple
    >>> import optree_core as optree
    >>> Point = namedtuple('Point', ['x', 'y'])
    >>> optree.is_namedtuple(Point(1, 2)), optree.is_namedtuple_class(Point)
    (True, True)
    >>> optree.namedtuple_fields(Point)
    ('x', 'y')
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Protocol, TypeVar, Union, runtime_checkable

from optree_core import _C
from optree_core._C import PyTreeKind, PyTreeSpec

__all__ = [
    "PyTree",
    "PyTreeSpec",
    "PyTreeDef",
    "PyTreeKind",
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
]

T = TypeVar("T")

PyTreeDef = PyTreeSpec  # The name JAX uses.

# Members print as <PyTreeKind.LEAF: 1>, as Python's IntEnum (and optree) do.
PyTreeKind.__repr__ = enum.Enum.__repr__  # type: ignore[method-assign]
PyTreeKind.__doc__ = (
    "The kind of a pytree node (an IntEnum numbered as optree's): CUSTOM, LEAF, NONE, TUPLE, "
    "LIST, DICT, NAMEDTUPLE, ORDEREDDICT, DEFAULTDICT, DEQUE, STRUCTSEQUENCE (FROZENDICT is "
    "reserved). ``PyTreeSpec.kind`` is the kind of a spec's root."
)

# A pytree of T: T itself or any container of pytrees of T. Python's type system cannot say
# this recursively without a plugin, so it is spelled as a union for readers and checkers.
PyTree = Union[T, tuple[Any, ...], list[Any], dict[Any, Any], None]  # noqa: UP007 (a runtime alias)


def PyTreeTypeVar(name: str, param: type) -> Any:
    """A type alias for pytrees whose leaves are ``param`` (documentation only)."""
    if not isinstance(name, str):
        raise TypeError(f"The name of the type variable must be a string, got {name!r}.")
    return PyTree[param]  # type: ignore[index]


@runtime_checkable
class CustomTreeNode(Protocol[T]):
    """The protocol of classes that flatten themselves (see ``register_pytree_node_class``)."""

    def tree_flatten(self) -> tuple[Iterable[T], Hashable] | tuple[Iterable[T], Hashable,
                                                                        Iterable[Any] | None]:
        ...

    @classmethod
    def tree_unflatten(cls, metadata: Hashable, children: tuple[T, ...]) -> CustomTreeNode[T]:
        ...


FlattenFunc = Callable[[Any], tuple[Iterable[Any], Hashable] | tuple[Iterable[Any], Hashable, Any]]
UnflattenFunc = Callable[[Hashable, Iterable[Any]], Any]


def is_namedtuple_class(cls: object, /) -> bool:
    """Whether ``cls`` is a namedtuple class (collections.namedtuple or typing.NamedTuple)."""
    return isinstance(cls, type) and _C.is_namedtuple_class(cls)


def is_namedtuple_instance(obj: object, /) -> bool:
    """Whether ``obj`` is an instance of a namedtuple class."""
    return is_namedtuple_class(type(obj))


def is_namedtuple(obj: object, /) -> bool:
    """Whether ``obj`` is a namedtuple class or an instance of one."""
    return is_namedtuple_class(obj if isinstance(obj, type) else type(obj))


def namedtuple_fields(obj: object, /) -> tuple[str, ...]:
    """The field names of a namedtuple class or instance.

    Raises:
        TypeError: if ``obj`` is not a namedtuple class or instance.
    """
    cls = obj if isinstance(obj, type) else type(obj)
    if not is_namedtuple_class(cls):
        raise TypeError(f"Expected a collections.namedtuple type or instance, got {obj!r}.")
    return cls._fields  # type: ignore[attr-defined]


def is_structseq_class(cls: object, /) -> bool:
    """Whether ``cls`` is a PyStructSequence class such as ``time.struct_time``."""
    return isinstance(cls, type) and _C.is_structseq_class(cls)


def is_structseq_instance(obj: object, /) -> bool:
    """Whether ``obj`` is an instance of a PyStructSequence class."""
    return is_structseq_class(type(obj))


def is_structseq(obj: object, /) -> bool:
    """Whether ``obj`` is a PyStructSequence class or an instance of one."""
    return is_structseq_class(obj if isinstance(obj, type) else type(obj))


def structseq_fields(obj: object, /) -> tuple[str, ...]:
    """The names of the sequence fields of a PyStructSequence class or instance.

    Raises:
        TypeError: if ``obj`` is not a PyStructSequence class or instance.
    """
    cls = obj if isinstance(obj, type) else type(obj)
    if not is_structseq_class(cls):
        raise TypeError(f"Expected a PyStructSequence type or instance, got {obj!r}.")
    return tuple(cls.__match_args__[: cls.n_sequence_fields])  # type: ignore[attr-defined]
