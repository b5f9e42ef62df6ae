"""Type aliases and structural type checks (namedtuple, PyStructSequence).

The aliases are for annotations: ``PyTree[T]`` is a tree whose leaves are ``T``;
``FlattenFunc`` is what ``register_pytree_node`` takes apart an instance with (it returns
``(children, metadata)`` or ``(children, metadata, entries)``), and ``UnflattenFunc`` rebuilds
one from ``(metadata, children)``.

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
import sys
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
    "StructSequence",
]

T = TypeVar("T")

PyTreeDef = PyTreeSpec  # The name JAX uses.

# Members print as <PyTreeKind.LEAF: 1>, as Python's IntEnum (and optree) do.
PyTreeKind.__repr__ = enum.Enum.__repr__  # type: ignore[method-assign]

# A pytree of T: T itself or any container of pytrees of T. Python's type system cannot say
# this recursively without a plugin, so it is spelled as a union for readers and checkers.
PyTree = Union[T, tuple[Any, ...], list[Any], dict[Any, Any], None]  # noqa: UP007 (a runtime alias)


def PyTreeTypeVar(name: str, param: type) -> Any:
    """A type alias for pytrees whose leaves are ``param`` (documentation only).

    Args:
        name: The name the alias stands for (kept for optree compatibility; must be a string).
        param: The type of the leaves.

    >>> import optree_core as optree
    >>> TensorTree = optree.PyTreeTypeVar('TensorTree', float)
    >>> def total(tree: TensorTree) -> float:
    ...     return optree.tree_sum(tree)
    >>> total({'a': 1.5, 'b': [2.0, 0.5]})
    4.0
    """
    if not isinstance(name, str):
        raise TypeError(f"The name of the type variable must be a string, got {name!r}.")
    return PyTree[param]  # type: ignore[index]


@runtime_checkable
class CustomTreeNode(Protocol[T]):
    """The protocol of classes that flatten themselves (see ``register_pytree_node_class``).

    >>> import optree_core as optree
    >>> @optree.register_pytree_node_class(namespace='ctn-doc')
    ... class Pair:
    ...     def __init__(self, left, right):
    ...         self.left, self.right = left, right
    ...     def tree_flatten(self):
    ...         return (self.left, self.right), None
    ...     @classmethod
    ...     def tree_unflatten(cls, metadata, children):
    ...         return cls(*children)
    >>> isinstance(Pair(1, 2), optree.CustomTreeNode), isinstance(3, optree.CustomTreeNode)
    (True, False)
    >>> optree.tree_leaves(Pair(1, [2, 3]), namespace='ctn-doc')
    [1, 2, 3]
    """

    def tree_flatten(self) -> tuple[Iterable[T], Hashable] | tuple[Iterable[T], Hashable,
                                                                        Iterable[Any] | None]:
        ...

    @classmethod
    def tree_unflatten(cls, metadata: Hashable, children: tuple[T, ...]) -> CustomTreeNode[T]:
        ...


FlattenFunc = Callable[[Any], tuple[Iterable[Any], Hashable] | tuple[Iterable[Any], Hashable, Any]]
UnflattenFunc = Callable[[Hashable, Iterable[Any]], Any]


def is_namedtuple_class(cls: object, /) -> bool:
    """Whether ``cls`` is a namedtuple class (collections.namedtuple or typing.NamedTuple).

    Args:
        cls: The object to test; instances are not classes, so they give ``False``.

    >>> from typing import NamedTuple
    >>> from optree_core import is_namedtuple_class
    >>> class Point(NamedTuple):
    ...     x: int
    ...     y: int
    >>> is_namedtuple_class(Point), is_namedtuple_class(Point(1, 2)), is_namedtuple_class(tuple)
    (True, False, False)
    """
    return isinstance(cls, type) and _C.is_namedtuple_class(cls)


def is_namedtuple_instance(obj: object, /) -> bool:
    """Whether ``obj`` is an instance of a namedtuple class.

    Args:
        obj: The object to test; a namedtuple class itself gives ``False``.

    >>> from collections import namedtuple
    >>> from optree_core import is_namedtuple_instance
    >>> Point = namedtuple('Point', 'x y')
    >>> is_namedtuple_instance(Point(1, 2)), is_namedtuple_instance(Point)
    (True, False)
    """
    return is_namedtuple_class(type(obj))


def is_namedtuple(obj: object, /) -> bool:
    """Whether ``obj`` is a namedtuple class or an instance of one.

    Args:
        obj: The object to test: a class or an instance.

    >>> from collections import namedtuple
    >>> from optree_core import is_namedtuple
    >>> Point = namedtuple('Point', 'x y')
    >>> is_namedtuple(Point), is_namedtuple(Point(1, 2)), is_namedtuple((1, 2))
    (True, True, False)
    """
    return is_namedtuple_class(obj if isinstance(obj, type) else type(obj))


def namedtuple_fields(obj: object, /) -> tuple[str, ...]:
    """The field names of a namedtuple class or instance.

    Args:
        obj: A namedtuple class or instance.

    Raises:
        TypeError: if ``obj`` is not a namedtuple class or instance.

    >>> from collections import namedtuple
    >>> from optree_core import namedtuple_fields
    >>> namedtuple_fields(namedtuple('Point', 'x y')(1, 2))
    ('x', 'y')
    >>> namedtuple_fields((1, 2))
    Traceback (most recent call last):
        ...
    TypeError: Expected a collections.namedtuple type or instance, got (1, 2).
    """
    cls = obj if isinstance(obj, type) else type(obj)
    if not is_namedtuple_class(cls):
        raise TypeError(f"Expected a collections.namedtuple type or instance, got {obj!r}.")
    return cls._fields  # type: ignore[attr-defined]


def is_structseq_class(cls: object, /) -> bool:
    """Whether ``cls`` is a PyStructSequence class such as ``time.struct_time``.

    Args:
        cls: The object to test; instances are not classes, so they give ``False``.

    >>> import os
    >>> from optree_core import is_structseq_class
    >>> is_structseq_class(os.stat_result), is_structseq_class(os.stat('.'))
    (True, False)
    """
    return isinstance(cls, type) and _C.is_structseq_class(cls)


def is_structseq_instance(obj: object, /) -> bool:
    """Whether ``obj`` is an instance of a PyStructSequence class.

    Args:
        obj: The object to test; a PyStructSequence class itself gives ``False``.

    >>> import time
    >>> from optree_core import is_structseq_instance
    >>> is_structseq_instance(time.gmtime(0)), is_structseq_instance(time.struct_time)
    (True, False)
    """
    return is_structseq_class(type(obj))


def is_structseq(obj: object, /) -> bool:
    """Whether ``obj`` is a PyStructSequence class or an instance of one.

    Args:
        obj: The object to test: a class or an instance.

    >>> import time
    >>> from optree_core import is_structseq
    >>> is_structseq(time.struct_time), is_structseq(time.gmtime(0)), is_structseq((1, 2))
    (True, True, False)
    """
    return is_structseq_class(obj if isinstance(obj, type) else type(obj))


def structseq_fields(obj: object, /) -> tuple[str, ...]:
    """The names of the sequence fields of a PyStructSequence class or instance.

    Args:
        obj: A PyStructSequence class or instance.

    Raises:
        TypeError: if ``obj`` is not a PyStructSequence class or instance.

    >>> import time
    >>> from optree_core import structseq_fields
    >>> structseq_fields(time.gmtime(0))[:3]
    ('tm_year', 'tm_mon', 'tm_mday')
    """
    cls = obj if isinstance(obj, type) else type(obj)
    if not is_structseq_class(cls):
        raise TypeError(f"Expected a PyStructSequence type or instance, got {obj!r}.")
    return _structseq_sequence_fields(cls)


# What a PyStructSequence slot without a name is called (CPython's own marker; not an
# identifier, so accessors fetch such slots by index).
PyStructSequence_UnnamedField = "unnamed field"


def _structseq_sequence_fields(cls: type) -> tuple[str, ...]:
    n_sequence = cls.n_sequence_fields  # type: ignore[attr-defined]
    n_unnamed = cls.n_unnamed_fields  # type: ignore[attr-defined]
    # Named fields are member descriptors listed in slot order; the unnamed ones may sit anywhere
    # among the sequence slots (os.stat_result has three in the middle), so locate each named
    # field by building an instance of distinct sentinels and seeing which one it returns.
    member_type = type(type(sys.version_info).major)
    named = [name for name, member in vars(cls).items()
             if isinstance(member, member_type)][: n_sequence - n_unnamed]
    if n_unnamed == 0:
        return tuple(named)
    sentinels = [object() for _ in range(n_sequence)]
    position = {id(s): i for i, s in enumerate(sentinels)}
    names = [PyStructSequence_UnnamedField] * n_sequence
    try:
        probe = cls(sentinels + [None] * (cls.n_fields - n_sequence))  # type: ignore[attr-defined]
    except (TypeError, ValueError):  # a type that checks its values: assume unnamed slots trail
        names[: len(named)] = named
        return tuple(names)
    for name in named:
        names[position[id(getattr(probe, name))]] = name
    return tuple(names)


# Reference implementations in plain Python, one per structural check above. Each public check
# exposes ``__cxx_implementation__`` (the compiled path it runs, i.e. itself) and
# ``__python_implementation__`` (the reference), as optree's do, so both can be tested alike.
_Py_TPFLAGS_BASETYPE = 1 << 10  # CPython's "may be subclassed" type flag


def _py_is_namedtuple_class(cls: object, /) -> bool:
    return (isinstance(cls, type) and issubclass(cls, tuple)
            and isinstance(getattr(cls, "_fields", None), tuple)
            and all(type(name) is str for name in cls._fields)  # type: ignore[attr-defined]
            and callable(getattr(cls, "_make", None)) and callable(getattr(cls, "_asdict", None)))


def _py_is_structseq_class(cls: object, /) -> bool:
    return (isinstance(cls, type) and cls.__bases__ == (tuple,)
            and all(isinstance(getattr(cls, name, None), int)
                    for name in ("n_fields", "n_sequence_fields", "n_unnamed_fields"))
            and not cls.__flags__ & _Py_TPFLAGS_BASETYPE)


def _py_namedtuple_fields(obj: object, /) -> tuple[str, ...]:
    cls = obj if isinstance(obj, type) else type(obj)
    if not _py_is_namedtuple_class(cls):
        raise TypeError(f"Expected a collections.namedtuple type or instance, got {obj!r}.")
    return cls._fields  # type: ignore[attr-defined]


def _py_structseq_fields(obj: object, /) -> tuple[str, ...]:
    cls = obj if isinstance(obj, type) else type(obj)
    if not _py_is_structseq_class(cls):
        raise TypeError(f"Expected a PyStructSequence type or instance, got {obj!r}.")
    return _structseq_sequence_fields(cls)


def _reference_checks(is_class: Callable[[object], bool]) -> tuple[Callable[[object], bool], ...]:
    """(is_instance, is_class_or_instance) built on a class check."""
    return (lambda obj, /: is_class(type(obj)),
            lambda obj, /: is_class(obj if isinstance(obj, type) else type(obj)))


for _public, _reference in (
    (is_namedtuple_class, _py_is_namedtuple_class),
    (is_namedtuple_instance, _reference_checks(_py_is_namedtuple_class)[0]),
    (is_namedtuple, _reference_checks(_py_is_namedtuple_class)[1]),
    (namedtuple_fields, _py_namedtuple_fields),
    (is_structseq_class, _py_is_structseq_class),
    (is_structseq_instance, _reference_checks(_py_is_structseq_class)[0]),
    (is_structseq, _reference_checks(_py_is_structseq_class)[1]),
    (structseq_fields, _py_structseq_fields),
):
    _public.__cxx_implementation__ = _public  # type: ignore[attr-defined]
    _public.__python_implementation__ = _reference  # type: ignore[attr-defined]
del _public, _reference


class _StructSequenceMeta(type):
    """Makes ``isinstance``/``issubclass`` against :class:`StructSequence` run the structural check."""

    def __instancecheck__(cls, instance: Any, /) -> bool:
        return is_structseq_instance(instance)

    def __subclasscheck__(cls, subclass: type, /) -> bool:
        return is_structseq_class(subclass)


class StructSequence(tuple, metaclass=_StructSequenceMeta):  # type: ignore[type-arg]
    """The type of CPython's PyStructSequence classes (``time.struct_time``, ``os.stat_result``),
    for annotations and ``isinstance`` checks; it cannot be instantiated or subclassed.

    Args:
        sequence: (not accepted: the class only stands for the real PyStructSequence types).

    >>> import time
    >>> from optree_core.typing import StructSequence
    >>> isinstance(time.gmtime(0), StructSequence), issubclass(time.struct_time, StructSequence)
    (True, True)
    >>> isinstance((1, 2), StructSequence)
    False
    """

    __slots__ = ()

    def __init_subclass__(cls, /, **kwargs: Any) -> None:
        raise TypeError("StructSequence stands for CPython's PyStructSequence types and cannot be "
                        "subclassed.")

    def __new__(cls, /, *args: Any, **kwargs: Any) -> StructSequence:
        raise NotImplementedError("StructSequence cannot be instantiated; build an instance of a real "
                        "PyStructSequence type (e.g. time.struct_time) instead.")
