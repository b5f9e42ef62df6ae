"""Path entries and PyTreeAccessor: which entry class each node kind yields, what calling and
codifying them gives, equality, pickling, and custom nodes with a path_entry_type."""

from __future__ import annotations

import collections
import pickle

import pytest
from helpers import Point, fresh_namespace, struct_time

import optree_core

K = optree_core.PyTreeKind


def _tree():
    return {
        "d": collections.deque([6]),
        "dd": collections.defaultdict(int, k=7),
        "l": [3],
        "n": Point(1, 2),
        "o": collections.OrderedDict(q=5),
        "s": struct_time(*range(9)),
        "t": (4,),
    }


def test_entry_classes_codify_and_paths_for_every_builtin():
    tree = _tree()
    accessors = optree_core.tree_accessors(tree)
    got = [(a.path, type(a[-1]).__name__, a.codify("tree")) for a in accessors]
    expected = [
        (("d", 0), "SequenceEntry", "tree['d'][0]"),
        (("dd", "k"), "MappingEntry", "tree['dd']['k']"),
        (("l", 0), "SequenceEntry", "tree['l'][0]"),
        (("n", 0), "NamedTupleEntry", "tree['n'].x"),
        (("n", 1), "NamedTupleEntry", "tree['n'].y"),
        (("o", "q"), "MappingEntry", "tree['o']['q']"),
    ]
    expected += [
        (("s", i), "StructSequenceEntry", f"tree['s'].{name}")
        for i, name in enumerate(time_fields())
    ]
    expected.append((("t", 0), "SequenceEntry", "tree['t'][0]"))
    assert got == expected
    for accessor, leaf in zip(accessors, optree_core.tree_leaves(tree)):
        assert accessor(tree) is leaf
    assert accessors == optree_core.tree_structure(tree).accessors()
    assert accessors == optree_core.treespec_accessors(optree_core.tree_structure(tree))


def time_fields():
    return (
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


def test_entry_attributes():
    accessor = optree_core.tree_accessors(_tree())[0]
    first, last = accessor[0], accessor[-1]
    assert isinstance(first, optree_core.MappingEntry)
    assert isinstance(first, optree_core.GetItemEntry)
    assert isinstance(first, optree_core.PyTreeEntry)
    assert (first.entry, first.type, first.kind) == ("d", dict, K.DICT)
    assert isinstance(last, optree_core.SequenceEntry)
    assert (last.entry, last.type, last.kind) == (0, collections.deque, K.DEQUE)
    assert len(accessor) == 2
    assert isinstance(accessor[0:1], optree_core.PyTreeAccessor)
    assert accessor[0:1].path == ("d",)


def test_namedtuple_entries_are_attribute_entries():
    accessor = optree_core.tree_accessors(Point(1, 2))[1]
    assert isinstance(accessor[0], optree_core.NamedTupleEntry)
    assert accessor[0].field == "y"
    assert accessor(Point(1, 2)) == 2
    assert accessor.codify("p") == "p.y"


def test_hand_built_accessor():
    item = optree_core.GetItemEntry("x", dict, K.DICT)
    attr = optree_core.GetAttrEntry("x", Point, K.NAMEDTUPLE)
    accessor = optree_core.PyTreeAccessor((item, attr))
    assert accessor({"x": Point(9, 8)}) == 9
    assert accessor.path == ("x", "x")
    assert accessor.codify("obj") == "obj['x'].x"
    assert item({"x": 3}) == 3
    assert attr(Point(5, 6)) == 5
    empty = optree_core.PyTreeAccessor()
    assert empty(42) == 42
    assert empty.path == ()
    assert optree_core.PyTreeAccessor((item,)) + optree_core.PyTreeAccessor((attr,)) == accessor


def test_accessor_equality_hash_and_pickle():
    a = optree_core.tree_accessors({"a": [1, 2]})
    b = optree_core.tree_accessors({"a": [3, 4]})
    assert a == b
    assert hash(a[0]) == hash(b[0])
    assert a[0] != a[1]
    clone = pickle.loads(pickle.dumps(a[1]))
    assert clone == a[1]
    assert clone({"a": [5, 6]}) == 6


def test_accessor_on_wrong_tree_raises_lookup_error():
    accessor = optree_core.tree_accessors({"a": [1]})[0]
    with pytest.raises(KeyError):
        accessor({"b": [1]})
    with pytest.raises(IndexError):
        accessor({"a": []})


def test_custom_node_path_entry_type():
    ns = fresh_namespace()

    class Obj:
        def __init__(self, x, y):
            self.x, self.y = x, y

    optree_core.register_pytree_node(
        Obj,
        lambda o: ((o.x, o.y), None, ("x", "y")),
        lambda m, c: Obj(*c),
        path_entry_type=optree_core.GetAttrEntry,
        namespace=ns,
    )
    obj = Obj(1, [2])
    accessors = optree_core.tree_accessors(obj, namespace=ns)
    assert [a.codify("o") for a in accessors] == ["o.x", "o.y[0]"]
    assert [a(obj) for a in accessors] == [1, 2]
    assert isinstance(accessors[0][0], optree_core.GetAttrEntry)


def test_custom_node_default_entry_is_flattened_entry():
    ns = fresh_namespace()

    class Opaque:
        def __init__(self, v):
            self.v = v

    optree_core.register_pytree_node(
        Opaque, lambda o: ((o.v,), None, ("v",)), lambda m, c: Opaque(*c), namespace=ns
    )
    accessor = optree_core.tree_accessors(Opaque(1), namespace=ns)[0]
    assert isinstance(accessor[0], optree_core.FlattenedEntry)
    assert accessor.path == ("v",)


def test_namedtuple_entry_indexes_like_a_sequence():
    # A NamedTupleEntry reads by position, so the accessor also works on a plain tuple.
    accessor = optree_core.tree_accessors(Point(1, 2))[1]
    assert accessor((10, 20)) == 20


def test_base_entry_fetches_by_item_and_explains_when_it_cannot():
    entry = optree_core.FlattenedEntry(1, list, K.CUSTOM)
    assert entry([10, 20]) == 20
    assert entry.codify("t") == "t[<flat index 1>]"
    with pytest.raises(TypeError, match="does not support item access"):
        entry(object())


def test_getattr_entry_walks_dotted_names_and_codifies_non_identifiers():
    import types

    obj = types.SimpleNamespace(inner=types.SimpleNamespace(value=3))
    assert optree_core.GetAttrEntry("inner.value", object, K.CUSTOM)(obj) == 3
    assert optree_core.GetAttrEntry("inner.value", object, K.CUSTOM).codify("o") == "o.inner.value"
    assert optree_core.GetAttrEntry("x-y", object, K.CUSTOM).codify("o") == "getattr(o, 'x-y')"
    assert optree_core.GetAttrEntry("a.1", object, K.CUSTOM).codify("o") == "getattr(o.a, '1')"


def test_entries_equal_when_they_fetch_the_same_way():
    class Renamed(optree_core.SequenceEntry):  # same __call__ and codify: the same entry
        __slots__ = ()

    class Reversed(optree_core.SequenceEntry):  # its own __call__: a different entry
        __slots__ = ()

        def __call__(self, obj):
            return obj[-1 - self.entry]

    base = optree_core.SequenceEntry(0, list, K.LIST)
    assert Renamed(0, list, K.LIST) == base and hash(Renamed(0, list, K.LIST)) == hash(base)
    assert Reversed(0, list, K.LIST) != base
    assert optree_core.GetItemEntry(0, list, K.LIST) == base  # SequenceEntry adds no behaviour
    assert optree_core.SequenceEntry(1, list, K.LIST) != base


def test_accessor_not_equal_to_a_plain_tuple_and_slices_keep_the_class():
    accessor = optree_core.tree_accessors(({"c": 1},))[0]
    assert accessor != tuple(accessor)
    assert accessor == optree_core.PyTreeAccessor(tuple(accessor))

    class MyAccessor(optree_core.PyTreeAccessor):
        __slots__ = ()

    mine = MyAccessor(tuple(accessor))
    assert type(mine[:1]) is MyAccessor and type(mine + mine[0]) is MyAccessor
    assert type(mine * 2) is MyAccessor


def test_auto_entry_dispatches_on_the_node_type():
    import dataclasses
    import sys
    from collections import UserDict, UserList

    @dataclasses.dataclass
    class DC:
        a: int

    cases = [
        (type(sys.float_info), 0, optree_core.StructSequenceEntry),
        (Point, 0, optree_core.NamedTupleEntry),
        (DC, "a", optree_core.DataclassEntry),
        (UserDict, "k", optree_core.MappingEntry),
        (UserList, 0, optree_core.SequenceEntry),
        (object, 0, optree_core.FlattenedEntry),
    ]
    for node_type, entry, expected in cases:
        assert type(optree_core.AutoEntry(entry, node_type, K.CUSTOM)) is expected
    with pytest.raises(ValueError, match="custom nodes only"):
        optree_core.AutoEntry(0, list, K.LIST)


def test_structseq_entries_of_unnamed_slots_use_the_index():
    import os

    st = os.stat_result(range(os.stat_result.n_fields))
    entries = [accessor[-1] for accessor in optree_core.tree_accessors(st)]
    assert len(entries) == os.stat_result.n_sequence_fields
    unnamed = [e for e in entries if e.is_unnamed]
    assert [e.entry for e in unnamed] == [7, 8, 9]  # the integer st_atime/st_mtime/st_ctime slots
    for e in unnamed:
        assert repr(e) == f"StructSequenceEntry(entry={e.entry}, type={os.stat_result!r})"
        assert e.codify("st") == f"st[{e.entry}]"
        assert e(st) == e.entry
    assert entries[0].field == "st_mode" and entries[0].codify("st") == "st.st_mode"
    assert entries[0].fields[:2] == ("st_mode", "st_ino")


def test_namedtuple_entry_fields():
    entry = optree_core.NamedTupleEntry(1, Point, K.NAMEDTUPLE)
    assert entry.fields == ("x", "y") and entry.field == "y"
