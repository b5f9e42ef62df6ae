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
