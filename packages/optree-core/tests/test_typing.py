"""The namedtuple / PyStructSequence predicates and field helpers."""

from __future__ import annotations

import collections
import os
import time
import typing

import pytest
from helpers import Empty, Point, Triple

import optree_core


class SubPoint(Point):
    pass


class FakeNamedTuple(tuple):
    """Has _fields but is not a namedtuple (no _make/_asdict)."""

    _fields = ("a",)


def test_is_namedtuple_family():
    for obj in (Point(1, 2), Triple(1, 2, 3), Empty(), SubPoint(1, 2)):
        assert optree_core.is_namedtuple(obj)
        assert optree_core.is_namedtuple(type(obj))
        assert optree_core.is_namedtuple_instance(obj)
        assert not optree_core.is_namedtuple_instance(type(obj))
        assert optree_core.is_namedtuple_class(type(obj))
        assert not optree_core.is_namedtuple_class(obj)
    for obj in ((1, 2), [1, 2], time.gmtime(0), FakeNamedTuple((1,)), None, tuple):
        assert not optree_core.is_namedtuple(obj)
        assert not optree_core.is_namedtuple_instance(obj)
        assert not optree_core.is_namedtuple_class(obj)


def test_namedtuple_fields():
    assert optree_core.namedtuple_fields(Point) == ("x", "y")
    assert optree_core.namedtuple_fields(Triple(1, 2, 3)) == ("a", "b", "c")
    assert optree_core.namedtuple_fields(Empty) == ()
    with pytest.raises(TypeError):
        optree_core.namedtuple_fields((1, 2))
    with pytest.raises(TypeError):
        optree_core.namedtuple_fields(time.gmtime(0))


def test_is_structseq_family():
    st = time.gmtime(0)
    for obj in (st, os.stat(".")):
        assert optree_core.is_structseq(obj)
        assert optree_core.is_structseq(type(obj))
        assert optree_core.is_structseq_instance(obj)
        assert not optree_core.is_structseq_instance(type(obj))
        assert optree_core.is_structseq_class(type(obj))
        assert not optree_core.is_structseq_class(obj)
    for obj in (Point(1, 2), (1, 2), [1], None, tuple, collections.OrderedDict()):
        assert not optree_core.is_structseq(obj)
        assert not optree_core.is_structseq_instance(obj)
        assert not optree_core.is_structseq_class(obj)


def test_structseq_fields():
    assert optree_core.structseq_fields(time.struct_time) == (
        "tm_year",
        "tm_mon",
        "tm_mday",
        "tm_hour",
        "tm_min",
        "tm_sec",
        "tm_wday",
        "tm_yday",
        "tm_isdst",
    )
    assert optree_core.structseq_fields(os.stat("."))[:3] == ("st_mode", "st_ino", "st_dev")
    with pytest.raises(TypeError):
        optree_core.structseq_fields(Point(1, 2))


def test_typing_namedtuple_is_a_namedtuple_node():
    class Typed(typing.NamedTuple):
        a: int
        b: str = "x"

    assert optree_core.is_namedtuple(Typed(1))
    leaves, spec = optree_core.tree_flatten(Typed(1, "y"))
    assert leaves == [1, "y"]
    assert spec.kind == optree_core.PyTreeKind.NAMEDTUPLE
    assert spec.unflatten([2, "z"]) == Typed(2, "z")
