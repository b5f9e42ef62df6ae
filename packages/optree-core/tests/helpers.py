"""Shared fixtures of the optree-core tests: node classes, sample trees, custom nodes, checks."""

from __future__ import annotations

import collections
import itertools
import re
import time
from typing import Any, NamedTuple

import reference

import optree_core

# -- built-in node classes used across the tests ------------------------------------------------

Point = collections.namedtuple("Point", ["x", "y"])
Empty = collections.namedtuple("Empty", [])


class Triple(NamedTuple):
    a: Any
    b: Any
    c: Any


def struct_time(*values: Any) -> time.struct_time:
    """A time.struct_time (a PyStructSequence with 9 visible fields) holding arbitrary values."""
    values = values + tuple(range(len(values), 9))
    return time.struct_time(values)


# -- custom nodes -------------------------------------------------------------------------------

_namespace_counter = itertools.count()


def fresh_namespace(prefix: str = "test") -> str:
    """A namespace no other test uses, so registrations never leak between tests."""
    return f"{prefix}-{next(_namespace_counter)}"


class Pair:
    """A custom node with named entries and metadata, registered in REFERENCE_NAMESPACE."""

    def __init__(self, left: Any, right: Any, tag: str = "pair") -> None:
        self.left, self.right, self.tag = left, right, tag

    def __eq__(self, other: object) -> bool:
        return type(other) is Pair and (self.left, self.right, self.tag) == (
            other.left,
            other.right,
            other.tag,
        )

    def __repr__(self) -> str:
        return f"Pair({self.left!r}, {self.right!r}, tag={self.tag!r})"


def _pair_flatten(p: Pair) -> tuple[tuple[Any, Any], str, tuple[str, str]]:
    return (p.left, p.right), p.tag, ("left", "right")


def _pair_unflatten(tag: str, children: Any) -> Pair:
    left, right = children
    return Pair(left, right, tag)


REFERENCE_NAMESPACE = "optree-core-tests.reference"
optree_core.register_pytree_node(
    Pair, _pair_flatten, _pair_unflatten, namespace=REFERENCE_NAMESPACE
)
reference.register_reference_node(Pair, _pair_flatten, _pair_unflatten)


# -- sample trees with their literal expectations -------------------------------------------------


class Case(NamedTuple):
    tree: Any
    leaves: list[Any]
    paths: list[tuple[Any, ...]]
    repr: str
    num_nodes: int


def sample_cases() -> list[Case]:
    """Trees of every built-in node kind with their leaves, paths and repr written out by hand."""
    return [
        Case(1, [1], [()], "PyTreeSpec(*)", 1),
        Case(None, [], [], "PyTreeSpec(None)", 1),
        Case((), [], [], "PyTreeSpec(())", 1),
        Case([], [], [], "PyTreeSpec([])", 1),
        Case({}, [], [], "PyTreeSpec({})", 1),
        Case((1,), [1], [(0,)], "PyTreeSpec((*,))", 2),
        Case([1, (2, None)], [1, 2], [(0,), (1, 0)], "PyTreeSpec([*, (*, None)])", 5),
        Case({"b": 1, "a": 2}, [2, 1], [("a",), ("b",)], "PyTreeSpec({'a': *, 'b': *})", 3),
        Case(
            collections.OrderedDict([("b", 1), ("a", 2)]),
            [1, 2],
            [("b",), ("a",)],
            "PyTreeSpec(OrderedDict({'b': *, 'a': *}))",
            3,
        ),
        Case(
            collections.defaultdict(list, {"b": 1, "a": [2]}),
            [2, 1],
            [("a", 0), ("b",)],
            "PyTreeSpec(defaultdict(<class 'list'>, {'a': [*], 'b': *}))",
            4,
        ),
        Case(
            collections.deque([1, [2]], maxlen=3),
            [1, 2],
            [(0,), (1, 0)],
            "PyTreeSpec(deque([*, [*]], maxlen=3))",
            4,
        ),
        Case(collections.deque([1]), [1], [(0,)], "PyTreeSpec(deque([*]))", 2),
        Case(Point(1, [2]), [1, 2], [(0,), (1, 0)], "PyTreeSpec(Point(x=*, y=[*]))", 4),
        Case(Empty(), [], [], "PyTreeSpec(Empty())", 1),
        Case(
            struct_time(*range(10, 19)),
            list(range(10, 19)),
            [(i,) for i in range(9)],
            "PyTreeSpec(time.struct_time(tm_year=*, tm_mon=*, tm_mday=*, tm_hour=*, tm_min=*,"
            " tm_sec=*, tm_wday=*, tm_yday=*, tm_isdst=*))",
            10,
        ),
        Case(
            {"z": [1, {"y": None, "x": 2}], "a": Triple(3, (), 4)},
            [3, 4, 1, 2],
            [("a", 0), ("a", 2), ("z", 0), ("z", 1, "x")],
            "PyTreeSpec({'a': Triple(a=*, b=(), c=*), 'z': [*, {'x': *, 'y': None}]})",
            10,
        ),
    ]


# -- checks ---------------------------------------------------------------------------------------


def path_renderings(path: tuple[Any, ...]) -> list[str]:
    """Ways an error message may spell a key path: ``['a'][0]``, ``('a', 0)``, ``a.0``, ``a/0``."""
    return [
        "".join(f"[{k!r}]" for k in path),
        repr(tuple(path)),
        ".".join(str(k) for k in path),
        "/".join(str(k) for k in path),
    ]


def assert_mentions_path(message: str, path: tuple[Any, ...]) -> None:
    """The error names WHERE the structures differ: the full key path from the root."""
    assert any(r in message for r in path_renderings(path)), (
        f"error message does not name the path {path!r} (as any of {path_renderings(path)}):"
        f"\n{message}"
    )


def assert_mentions_all(message: str, *fragments: str) -> None:
    missing = [f for f in fragments if f not in message]
    assert not missing, f"error message lacks {missing!r}:\n{message}"


def normalize_space(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()
