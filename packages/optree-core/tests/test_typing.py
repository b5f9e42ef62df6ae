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


def test_structseq_fields_marks_unnamed_slots_in_place():
    import os

    fields = optree_core.structseq_fields(os.stat_result)
    assert len(fields) == os.stat_result.n_sequence_fields
    unnamed = optree_core.typing.PyStructSequence_UnnamedField
    assert [i for i, name in enumerate(fields) if name == unnamed] == [7, 8, 9]
    assert fields[:7] == os.stat_result.__match_args__[:7]


def test_compiled_and_reference_checks_agree():
    import collections
    import os
    import sys
    import time

    Pair = collections.namedtuple("Pair", "a b")
    samples = [Pair, Pair(1, 2), (1, 2), tuple, time.struct_time, time.gmtime(0), sys.float_info,
               os.stat_result, int, 3, None, type("FakeStruct", (tuple,), {"n_fields": 1,
                                                                         "n_sequence_fields": 1,
                                                                         "n_unnamed_fields": 0})]
    for name in ("is_namedtuple", "is_namedtuple_class", "is_namedtuple_instance",
                 "is_structseq", "is_structseq_class", "is_structseq_instance"):
        public = getattr(optree_core, name)
        for sample in samples:
            assert public.__python_implementation__(sample) == public.__cxx_implementation__(sample)
    for name, good in (("namedtuple_fields", Pair), ("structseq_fields", os.stat_result)):
        public = getattr(optree_core, name)
        assert public.__python_implementation__(good) == public(good)
        with pytest.raises(TypeError):
            public.__python_implementation__((1, 2))


def test_struct_sequence_type_checks_structurally_and_cannot_be_built():
    import time

    from optree_core.typing import StructSequence

    assert isinstance(time.gmtime(0), StructSequence)
    assert issubclass(time.struct_time, StructSequence)
    assert not isinstance((1, 2), StructSequence) and not issubclass(tuple, StructSequence)
    with pytest.raises(TypeError, match="cannot be subclassed"):
        type("Sub", (StructSequence,), {})
    with pytest.raises(NotImplementedError):
        StructSequence(range(1))
