"""optree_core's tree functions (ops): literal expectations for every built-in node kind, every
public tree_* function, and the errors bad input must raise."""

from __future__ import annotations

import collections
import copy
import gc
import subprocess
import sys
import textwrap
import weakref

import pytest
from helpers import (
    Empty,
    Point,
    Triple,
    assert_mentions_all,
    assert_mentions_path,
    fresh_namespace,
    sample_cases,
    struct_time,
)

import optree_core

CASES = sample_cases()
CASE_IDS = [type(c.tree).__name__ + str(i) for i, c in enumerate(CASES)]

# The public API issue 2 promises, name for name with optree.
PUBLIC_NAMES = [
    "tree_flatten",
    "tree_flatten_with_path",
    "tree_unflatten",
    "tree_leaves",
    "tree_structure",
    "tree_map",
    "tree_map_",
    "tree_map_with_path",
    "tree_iter",
    "tree_paths",
    "tree_all",
    "tree_any",
    "tree_reduce",
    "tree_sum",
    "tree_max",
    "tree_min",
    "tree_transpose",
    "tree_broadcast_prefix",
    "tree_broadcast_map",
    "tree_replace_nones",
    "tree_partition",
    "tree_flatten_one_level",
    "all_leaves",
    "prefix_errors",
    "treespec_leaf",
    "treespec_none",
    "treespec_tuple",
    "treespec_list",
    "treespec_dict",
    "treespec_namedtuple",
    "treespec_ordereddict",
    "treespec_defaultdict",
    "treespec_deque",
    "treespec_structseq",
    "treespec_from_collection",
    "treespec_is_leaf",
    "treespec_is_strict_leaf",
    "treespec_is_prefix",
    "treespec_is_suffix",
    "treespec_paths",
    "treespec_entries",
    "treespec_children",
    "treespec_child",
    "treespec_entry",
    "PyTreeSpec",
    "PyTreeKind",
    "PyTreeEntry",
    "GetItemEntry",
    "GetAttrEntry",
    "PyTreeAccessor",
    "SequenceEntry",
    "MappingEntry",
    "NamedTupleEntry",
    "StructSequenceEntry",
    "FlattenedEntry",
    "register_pytree_node",
    "register_pytree_node_class",
    "unregister_pytree_node",
    "dict_insertion_ordered",
    "is_namedtuple",
    "is_namedtuple_class",
    "is_namedtuple_instance",
    "namedtuple_fields",
    "is_structseq",
    "is_structseq_class",
    "is_structseq_instance",
    "structseq_fields",
    "MAX_RECURSION_DEPTH",
]


@pytest.mark.parametrize("name", PUBLIC_NAMES)
def test_public_name_exists_and_is_exported(name):
    assert hasattr(optree_core, name), f"optree_core.{name} is missing"
    assert name in optree_core.__all__


def test_version_is_a_string():
    assert isinstance(optree_core.__version__, str)
    assert optree_core.__version__.count(".") >= 2


# -- flatten / leaves / structure / paths on every built-in kind ----------------------------------


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_flatten_literal(case):
    leaves, spec = optree_core.tree_flatten(case.tree)
    assert leaves == case.leaves
    assert repr(spec) == case.repr
    assert spec.num_leaves == len(case.leaves)
    assert spec.num_nodes == case.num_nodes
    assert optree_core.tree_leaves(case.tree) == case.leaves
    assert list(optree_core.tree_iter(case.tree)) == case.leaves
    assert optree_core.tree_structure(case.tree) == spec
    assert optree_core.tree_paths(case.tree) == case.paths
    paths, leaves2, spec2 = optree_core.tree_flatten_with_path(case.tree)
    assert (paths, leaves2, spec2) == (case.paths, case.leaves, spec)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_unflatten_restores_type_and_order(case):
    leaves, spec = optree_core.tree_flatten(case.tree)
    rebuilt = optree_core.tree_unflatten(spec, leaves)
    assert type(rebuilt) is type(case.tree)
    assert rebuilt == case.tree
    if isinstance(case.tree, dict):
        assert list(rebuilt) == list(case.tree)


def test_dict_flattens_sorted_but_unflattens_in_insertion_order():
    tree = {"b": 1, "c": 2, "a": 3}
    leaves, spec = optree_core.tree_flatten(tree)
    assert leaves == [3, 1, 2]
    rebuilt = optree_core.tree_unflatten(spec, [30, 10, 20])
    assert list(rebuilt.items()) == [("b", 10), ("c", 20), ("a", 30)]
    # Two dicts that differ only in insertion order have equal specs and map together.
    assert spec == optree_core.tree_structure({"a": 0, "c": 0, "b": 0})
    both = optree_core.tree_map(lambda x, y: (x, y), tree, {"a": 7, "b": 8, "c": 9})
    assert list(both.items()) == [("b", (1, 8)), ("c", (2, 9)), ("a", (3, 7))]


def test_dict_with_mixed_key_types_sorts_by_type_name_then_value():
    leaves, spec = optree_core.tree_flatten({"b": 2, 1: "one", "a": 3, 0: "zero"})
    assert leaves == ["zero", "one", 3, 2]
    assert spec.entries() == [0, 1, "a", "b"]


def test_ordereddict_keeps_its_order():
    tree = collections.OrderedDict([("b", 1), ("a", 2)])
    leaves, spec = optree_core.tree_flatten(tree)
    assert leaves == [1, 2]
    assert spec.entries() == ["b", "a"]
    rebuilt = spec.unflatten([5, 6])
    assert type(rebuilt) is collections.OrderedDict
    assert list(rebuilt.items()) == [("b", 5), ("a", 6)]
    # For an OrderedDict the order is part of the structure.
    assert spec != optree_core.tree_structure(collections.OrderedDict([("a", 1), ("b", 2)]))
    assert spec.kind == optree_core.PyTreeKind.ORDEREDDICT


def test_defaultdict_keeps_default_factory():
    tree = collections.defaultdict(list, {"y": 1, "x": 2})
    leaves, spec = optree_core.tree_flatten(tree)
    assert leaves == [2, 1]
    rebuilt = spec.unflatten(["X", "Y"])
    assert type(rebuilt) is collections.defaultdict
    assert rebuilt.default_factory is list
    assert list(rebuilt.items()) == [("y", "Y"), ("x", "X")]
    assert rebuilt["missing"] == []
    assert spec != optree_core.tree_structure(collections.defaultdict(int, {"y": 1, "x": 2}))
    assert spec != optree_core.tree_structure({"y": 1, "x": 2})
    assert spec.kind == optree_core.PyTreeKind.DEFAULTDICT


def test_deque_keeps_maxlen():
    tree = collections.deque([1, 2], maxlen=4)
    leaves, spec = optree_core.tree_flatten(tree)
    assert leaves == [1, 2]
    rebuilt = spec.unflatten([3, 4])
    assert type(rebuilt) is collections.deque
    assert rebuilt.maxlen == 4
    assert list(rebuilt) == [3, 4]
    assert spec != optree_core.tree_structure(collections.deque([1, 2], maxlen=5))
    assert spec != optree_core.tree_structure(collections.deque([1, 2]))
    assert spec.kind == optree_core.PyTreeKind.DEQUE


def test_namedtuple_and_structseq_round_trip():
    tree = [Point(1, 2), Triple(3, 4, 5), Empty(), struct_time(*range(9))]
    leaves, spec = optree_core.tree_flatten(tree)
    assert leaves == [1, 2, 3, 4, 5, *range(9)]
    rebuilt = spec.unflatten(leaves)
    assert [type(x) for x in rebuilt] == [Point, Triple, Empty, type(struct_time())]
    assert rebuilt == tree
    assert spec.child(0).kind == optree_core.PyTreeKind.NAMEDTUPLE
    assert spec.child(3).kind == optree_core.PyTreeKind.STRUCTSEQUENCE
    assert spec.child(3).type is type(struct_time())
    # A namedtuple is not a tuple of the same arity, as a structure.
    assert optree_core.tree_structure(Point(1, 2)) != optree_core.tree_structure((1, 2))


def test_os_stat_result_is_a_structseq_with_its_visible_fields():
    import os

    st = os.stat(".")
    leaves, spec = optree_core.tree_flatten(st)
    assert leaves == list(st)
    assert spec.kind == optree_core.PyTreeKind.STRUCTSEQUENCE
    assert spec.num_leaves == os.stat_result.n_sequence_fields
    assert spec.unflatten(leaves) == st
    assert type(spec.unflatten(leaves)) is os.stat_result


def test_none_is_a_node_without_children_by_default():
    assert optree_core.tree_leaves([None, 1, (None,)]) == [1]
    spec = optree_core.tree_structure(None)
    assert spec.kind == optree_core.PyTreeKind.NONE
    assert (spec.num_leaves, spec.num_nodes) == (0, 1)
    assert optree_core.tree_map(lambda x: x + 1, {"a": None, "b": 1}) == {"a": None, "b": 2}


def test_none_is_leaf_true():
    leaves, spec = optree_core.tree_flatten([None, 1, (None,)], none_is_leaf=True)
    assert leaves == [None, 1, None]
    assert repr(spec) == "PyTreeSpec([*, *, (*,)], NoneIsLeaf)"
    assert spec.none_is_leaf
    assert spec != optree_core.tree_structure([None, 1, (None,)])
    assert optree_core.tree_map(lambda x: x is None, [None, 1], none_is_leaf=True) == [True, False]
    assert optree_core.tree_structure(None, none_is_leaf=True).kind == optree_core.PyTreeKind.LEAF


def test_is_leaf_stops_descent():
    tree = {"a": [1, 2], "b": (3, [4])}
    leaves = optree_core.tree_leaves(tree, is_leaf=lambda x: isinstance(x, list))
    assert leaves == [[1, 2], 3, [4]]
    paths = optree_core.tree_paths(tree, is_leaf=lambda x: isinstance(x, list))
    assert paths == [("a",), ("b", 0), ("b", 1)]
    mapped = optree_core.tree_map(
        lambda x: len(x) if isinstance(x, list) else -x,
        tree,
        is_leaf=lambda x: isinstance(x, list),
    )
    assert mapped == {"a": 2, "b": (-3, 1)}


def test_is_leaf_exception_is_reraised():
    def bad(x):
        raise KeyError("from is_leaf")

    with pytest.raises(KeyError, match="from is_leaf"):
        optree_core.tree_flatten([1], is_leaf=bad)


def test_leaves_are_returned_by_identity():
    a, b = object(), object()
    leaves = optree_core.tree_leaves({"x": a, "y": [b]})
    assert leaves[0] is a
    assert leaves[1] is b


# -- unflatten errors -------------------------------------------------------------------------------


def test_unflatten_too_few_leaves_says_expected_and_got():
    spec = optree_core.tree_structure({"a": [1, 2], "b": 3})
    with pytest.raises(ValueError) as info:
        optree_core.tree_unflatten(spec, [1, 2])
    assert_mentions_all(str(info.value), "3", "2")


def test_unflatten_too_few_leaves_names_the_first_leaf_left_without_a_value():
    # Issue 2: a wrong leaf count on unflatten says where (the path) and what differs.
    spec = optree_core.tree_structure({"a": [1, 2], "b": {"c": 3, "d": 4}})
    with pytest.raises(ValueError) as info:
        optree_core.tree_unflatten(spec, [1, 2, 3])
    message = str(info.value)
    assert_mentions_path(message, ("b", "d"))
    assert_mentions_all(message, "4", "3")


def test_unflatten_too_many_leaves_says_expected():
    spec = optree_core.tree_structure({"a": [1, 2], "b": 3})
    with pytest.raises(ValueError) as info:
        optree_core.tree_unflatten(spec, [1, 2, 3, 4])
    assert "3" in str(info.value)


def test_unflatten_accepts_any_iterable():
    spec = optree_core.tree_structure([1, (2, 3)])
    assert spec.unflatten(iter([4, 5, 6])) == [4, (5, 6)]
    assert spec.unflatten(range(3)) == [0, (1, 2)]


def test_unflatten_rejects_non_iterable_leaves():
    spec = optree_core.tree_structure([1, 2])
    with pytest.raises(TypeError):
        optree_core.tree_unflatten(spec, 5)


def test_unflatten_passes_on_the_error_of_a_failing_iter():
    class Unreadable:
        def __iter__(self):
            raise LookupError("cannot iterate this one")

    spec = optree_core.tree_structure([1, 2])
    with pytest.raises(LookupError, match="cannot iterate this one"):
        spec.unflatten(Unreadable())


def test_unflatten_rejects_non_treespec():
    with pytest.raises((TypeError, AttributeError)):
        optree_core.tree_unflatten([1, 2], [1, 2])


# -- unflatten: the leaves container --------------------------------------------------------------
# Lists and tuples are read by index, anything else (list subclasses included) through iter().

# Runs of consecutive leaves of every length, between nodes built in place and by MakeNode.
MIXED_TREE = {
    "z": [1, (2, 3), None, {"k": 4}],
    "a": collections.OrderedDict(y=5, x=Point(6, [7, 8, 9])),
    "m": (10,),
    "e": [],
}


class ReversedList(list):
    """A list subclass whose iteration order differs from its indexing order."""

    def __iter__(self):
        return iter(self[::-1])  # a slice of a list subclass is a plain list


@pytest.mark.parametrize(
    "wrap", [list, tuple, lambda xs: (x for x in xs), collections.deque, ReversedList]
)
def test_unflatten_reads_every_kind_of_leaves_container(wrap):
    leaves, spec = optree_core.tree_flatten(MIXED_TREE)
    values = [f"v{x}" for x in leaves]
    expected = optree_core.tree_map(lambda x: f"v{x}", MIXED_TREE)
    if wrap is ReversedList:
        # iter() decides the order, not the list's items.
        rebuilt = spec.unflatten(ReversedList(reversed(values)))
    else:
        rebuilt = spec.unflatten(wrap(values))
    assert rebuilt == expected
    assert list(rebuilt) == ["z", "a", "m", "e"]  # insertion order kept
    assert type(rebuilt["a"]["x"]) is Point


def test_unflatten_many_times_and_from_copies_gives_the_same_tree():
    leaves, spec = optree_core.tree_flatten(MIXED_TREE)
    for other in (spec, copy.copy(spec), copy.deepcopy(spec), spec, *spec.children()):
        n = other.num_leaves
        assert other.unflatten(list(range(n))) == optree_core.tree_unflatten(
            other, tuple(range(n))
        )
    assert spec.unflatten(leaves) == MIXED_TREE


@pytest.mark.parametrize("wrap", [list, tuple, iter])
def test_unflatten_wide_and_deep_trees(wrap):
    deep = 0
    for _ in range(200):
        deep = [deep, (1, 2)]
    tree = [list(range(3000)), deep, {str(i): [i, i] for i in range(300)}]
    leaves, spec = optree_core.tree_flatten(tree)
    assert spec.unflatten(wrap(leaves)) == tree


@pytest.mark.parametrize("wrap", [list, tuple, iter])
def test_unflatten_wrong_count_in_a_run_of_leaves_raises(wrap):
    spec = optree_core.tree_structure([{"a": 1}, 2, 3, 4, (5,)])
    with pytest.raises(ValueError, match="Too few leaves"):
        spec.unflatten(wrap([1, 2, 3]))
    with pytest.raises(ValueError, match="Too many leaves"):
        spec.unflatten(wrap([1, 2, 3, 4, 5, 6]))


def test_unflatten_propagates_the_iterators_own_error():
    spec = optree_core.tree_structure([1, 2, 3])

    def broken():
        yield 1
        raise KeyError("from the generator")

    with pytest.raises(KeyError, match="from the generator"):
        spec.unflatten(broken())


def _resizing_node(ns, leaves, resize):
    """A custom node whose unflatten function resizes `leaves` (the list being unflattened)."""

    class Box:
        def __init__(self, value):
            self.value = value

    def unflatten(meta, children):
        resize(leaves)
        return Box(children[0])

    optree_core.register_pytree_node(Box, lambda b: ((b.value,), None), unflatten, namespace=ns)
    return Box


@pytest.mark.parametrize("resize", [list.clear, lambda xs: xs.extend(range(5000))])
def test_unflatten_list_resized_by_a_node_function_raises_instead_of_reading_past_it(resize):
    ns = fresh_namespace()
    leaves = list(range(1000))
    box = _resizing_node(ns, leaves, resize)
    spec = optree_core.tree_structure([box(0), *range(1, 1000)], namespace=ns)
    with pytest.raises(RuntimeError, match="changed size"):
        optree_core.tree_unflatten(spec, leaves)


def test_unflatten_list_items_replaced_by_a_node_function_are_read_afresh():
    ns = fresh_namespace()
    leaves = ["a", "b", "c"]
    box = _resizing_node(ns, leaves, lambda xs: xs.__setitem__(slice(None), ["x", "y", "z"]))
    spec = optree_core.tree_structure([box(0), 1, 2], namespace=ns)
    rebuilt = optree_core.tree_unflatten(spec, leaves)
    assert (rebuilt[0].value, rebuilt[1:]) == ("a", ["y", "z"])


class CollidingKey:
    """A dict key whose hash collides with its peers, so inserting it calls __eq__ (which may
    run arbitrary code: here, emptying the leaves list being unflattened)."""

    on_eq = None

    def __init__(self, name):
        self.name = name

    def __hash__(self):
        return 0

    def __eq__(self, other):
        if CollidingKey.on_eq is not None:
            CollidingKey.on_eq()
        return isinstance(other, CollidingKey) and other.name == self.name

    def __lt__(self, other):
        return self.name < other.name


def test_unflatten_list_emptied_by_a_dict_keys_eq_raises():
    tree = [{CollidingKey("a"): 1, CollidingKey("b"): 2}, *range(3, 600)]
    leaves, spec = optree_core.tree_flatten(tree)
    CollidingKey.on_eq = leaves.clear
    try:
        with pytest.raises(RuntimeError, match="changed size"):
            spec.unflatten(leaves)
    finally:
        CollidingKey.on_eq = None
    assert leaves == []  # emptied by __eq__, nothing else touched


# -- tree_map family ------------------------------------------------------------------------------


def test_tree_map_multiple_trees():
    out = optree_core.tree_map(
        lambda a, b, c: a + b * c,
        {"x": [1, 2], "y": 3},
        {"x": [4, 5], "y": 6},
        {"x": [7, 8], "y": 9},
    )
    assert out == {"x": [29, 42], "y": 57}


def test_tree_map_rest_may_be_deeper_than_first_tree():
    out = optree_core.tree_map(lambda x, y: (x, y), [1, 2], [[1, 2], {"k": 3}])
    assert out == [(1, [1, 2]), (2, {"k": 3})]


def test_tree_map_keeps_node_types():
    tree = [collections.OrderedDict(b=1, a=2), collections.deque([3], maxlen=2), Point(4, 5)]
    out = optree_core.tree_map(lambda x: x * 10, tree)
    assert out == [
        collections.OrderedDict(b=10, a=20),
        collections.deque([30], maxlen=2),
        Point(40, 50),
    ]
    assert out[1].maxlen == 2
    assert type(out[2]) is Point


def test_tree_map_func_exception_propagates():
    with pytest.raises(ZeroDivisionError):
        optree_core.tree_map(lambda x: 1 / x, [1, 0])


def test_tree_map_mismatched_list_length_says_where_and_what():
    left = {"outer": {"inner": [1, 2]}, "z": 0}
    right = {"outer": {"inner": [1, 2, 3]}, "z": 0}
    with pytest.raises(ValueError) as info:
        optree_core.tree_map(lambda a, b: a, left, right)
    message = str(info.value)
    assert_mentions_path(message, ("outer", "inner"))
    assert_mentions_all(message, "2", "3")


def test_tree_map_mismatched_dict_keys_says_where_and_which_keys():
    left = [0, {"a": {"p": 1, "q": 2}}]
    right = [0, {"a": {"p": 1, "r": 2}}]
    with pytest.raises(ValueError) as info:
        optree_core.tree_map(lambda a, b: a, left, right)
    message = str(info.value)
    assert_mentions_path(message, (1, "a"))
    assert_mentions_all(message, "'q'", "'r'")


def test_tree_map_mismatched_node_type_says_where_and_which_types():
    left = {"k": [(1, 2)]}
    right = {"k": [[1, 2]]}
    with pytest.raises(ValueError) as info:
        optree_core.tree_map(lambda a, b: a, left, right)
    message = str(info.value)
    assert_mentions_path(message, ("k", 0))
    assert_mentions_all(message, "tuple", "list")


def test_tree_map_none_versus_leaf_says_where():
    with pytest.raises(ValueError) as info:
        optree_core.tree_map(lambda a, b: a, {"w": [1, None]}, {"w": [2, 3]})
    assert_mentions_path(str(info.value), ("w", 1))
    assert "None" in str(info.value)


def test_tree_map_mismatch_namedtuple_vs_tuple():
    with pytest.raises(ValueError):
        optree_core.tree_map(lambda a, b: a, Point(1, 2), (1, 2))
    with pytest.raises(ValueError):
        optree_core.tree_map(lambda a, b: a, (1, 2), Point(1, 2))


def test_tree_map_mismatch_deque_maxlen_and_list():
    with pytest.raises(ValueError):
        optree_core.tree_map(lambda a, b: a, [1, 2], collections.deque([1, 2]))


def test_tree_map_dict_accepts_ordereddict_and_defaultdict_rests():
    # Dict-like rests match a dict by keys, whatever their order (optree semantics).
    assert optree_core.tree_map(
        lambda a, b: a + b, {"a": 1, "b": 2}, collections.OrderedDict(b=10, a=20)
    ) == {"a": 21, "b": 12}
    assert optree_core.tree_map(
        lambda a, b: a + b, {"a": 1}, collections.defaultdict(int, a=5)
    ) == {"a": 6}


def test_tree_map_underscore_returns_first_tree_and_calls_in_order():
    seen = []
    tree = {"b": [1], "a": 2}
    out = optree_core.tree_map_(lambda x, y: seen.append((x, y)), tree, {"b": [10], "a": 20})
    assert out is tree
    assert seen == [(2, 20), (1, 10)]
    assert tree == {"b": [1], "a": 2}


def test_tree_map_with_path():
    out = optree_core.tree_map_with_path(
        lambda p, x, y: (p, x + y), {"b": [1, 2], "a": 3}, {"b": [10, 20], "a": 30}
    )
    assert out == {"b": [(("b", 0), 11), (("b", 1), 22)], "a": (("a",), 33)}


def test_tree_map_does_not_modify_inputs():
    tree = {"a": [1, {"b": 2}], "c": (3,)}
    snapshot = copy.deepcopy(tree)
    optree_core.tree_map(lambda x: x * 2, tree)
    with pytest.raises(ValueError):
        optree_core.tree_map(lambda x, y: x, tree, {"a": [1], "c": (3,)})
    assert tree == snapshot


# -- reductions and predicates --------------------------------------------------------------------


def test_tree_reduce_sum_max_min():
    tree = {"a": 2, "b": [3, (4,)], "c": None}
    assert optree_core.tree_reduce(lambda a, b: a * b, tree) == 24
    assert optree_core.tree_reduce(lambda a, b: a * b, tree, 10) == 240
    assert optree_core.tree_reduce(lambda a, b: a * b, {}, 7) == 7
    with pytest.raises(TypeError):
        optree_core.tree_reduce(lambda a, b: a * b, {})
    assert optree_core.tree_sum(tree) == 9
    assert optree_core.tree_sum(tree, start=100) == 109
    assert optree_core.tree_sum({}) == 0
    assert optree_core.tree_sum([[1.5], [2]], start=0.5) == 4.0
    assert optree_core.tree_max(tree) == 4
    assert optree_core.tree_min(tree) == 2
    assert optree_core.tree_max({"a": -5, "b": 3}, key=abs) == -5
    assert optree_core.tree_min({"a": -5, "b": 3}, key=abs) == 3
    assert optree_core.tree_max({}, default=-1) == -1
    with pytest.raises(ValueError):
        optree_core.tree_max({})
    with pytest.raises(ValueError):
        optree_core.tree_min([None])


def test_tree_all_any():
    assert optree_core.tree_all({"a": 1, "b": [True, 2]})
    assert not optree_core.tree_all({"a": 1, "b": [0]})
    assert optree_core.tree_all({})
    assert optree_core.tree_any({"a": 0, "b": [1]})
    assert not optree_core.tree_any({"a": 0, "b": [None]})
    assert not optree_core.tree_any({})
    assert optree_core.tree_all({"a": None})
    assert not optree_core.tree_all({"a": None}, none_is_leaf=True)


def test_all_leaves():
    assert optree_core.all_leaves([1, "x", 2.5])
    assert not optree_core.all_leaves([1, [2]])
    assert not optree_core.all_leaves([1, None])
    assert optree_core.all_leaves([1, None], none_is_leaf=True)
    assert optree_core.all_leaves([[1]], is_leaf=lambda x: isinstance(x, list))


# -- structural helpers ---------------------------------------------------------------------------


def test_tree_transpose():
    outer = optree_core.tree_structure([0, 0, 0])
    inner = optree_core.tree_structure({"x": 0, "y": (0,)})
    tree = [{"x": 1, "y": (2,)}, {"x": 3, "y": (4,)}, {"x": 5, "y": (6,)}]
    out = optree_core.tree_transpose(outer, inner, tree)
    assert out == {"x": [1, 3, 5], "y": ([2, 4, 6],)}


def test_tree_transpose_wrong_outer_structure():
    outer = optree_core.tree_structure([0, 0])
    inner = optree_core.tree_structure((0, 0))
    with pytest.raises((TypeError, ValueError)):
        optree_core.tree_transpose(outer, inner, [(1, 2), (3, 4), (5, 6)])


def test_tree_broadcast_prefix():
    out = optree_core.tree_broadcast_prefix([1, {"a": 2}, 3], [[4, 5], {"a": (6, 7)}, 8])
    assert out == [[1, 1], {"a": (2, 2)}, 3]
    assert optree_core.tree_broadcast_prefix(0, {"a": [1, 2], "b": 3}) == {"a": [0, 0], "b": 0}


def test_tree_broadcast_prefix_mismatch_says_where_and_what():
    with pytest.raises(ValueError) as info:
        optree_core.tree_broadcast_prefix({"m": {"n": [1, 2]}}, {"m": {"n": [1, 2, 3]}})
    message = str(info.value)
    assert_mentions_path(message, ("m", "n"))
    assert_mentions_all(message, "2", "3")


def test_tree_broadcast_map_either_side_may_be_the_prefix():
    expected = [[4, 5], {"a": (7, 8)}]
    assert (
        optree_core.tree_broadcast_map(lambda a, b: a + b, [1, {"a": 2}], [[3, 4], {"a": (5, 6)}])
        == expected
    )
    assert (
        optree_core.tree_broadcast_map(lambda a, b: a + b, [[3, 4], {"a": (5, 6)}], [1, {"a": 2}])
        == expected
    )
    assert optree_core.tree_broadcast_map(lambda a, b: a + b, [[3, 4], 5], [1, [2, 3]]) == [
        [4, 5],
        [7, 8],
    ]


def test_tree_broadcast_map_with_accessor_passes_the_common_structures_accessors():
    point = Point(1, [2, 3])
    result = optree_core.tree_broadcast_map_with_accessor(
        lambda a, x, y: (a.codify("t"), a(big), x + y), [1, {"k": 2}], big := [[10, 20], {"k": point}])
    assert result == [
        [("t[0][0]", 10, 11), ("t[0][1]", 20, 21)],
        {"k": Point(("t[1]['k'].x", 1, 3), [("t[1]['k'].y[0]", 2, 4), ("t[1]['k'].y[1]", 3, 5)])},
    ]
    # The accessors' paths are the paths tree_broadcast_map_with_path passes, leaf for leaf.
    paths, accessor_paths = [], []
    optree_core.tree_broadcast_map_with_path(lambda p, x, y: paths.append(p), [1, {"k": 2}], big)
    optree_core.tree_broadcast_map_with_accessor(lambda a, x, y: accessor_paths.append(a.path), [1, {"k": 2}], big)
    assert accessor_paths == paths and len(paths) == 5


def test_tree_transpose_map_with_accessor():
    tree = {"b": (2, [3, 4]), "a": 1}
    result = optree_core.tree_transpose_map_with_accessor(lambda a, x, y: {"at": a.codify("t"), "sum": x + y},
                                                          tree, {"b": (10, [20, 30]), "a": 40})
    assert result == {
        "at": {"a": "t['a']", "b": ("t['b'][0]", ["t['b'][1][0]", "t['b'][1][1]"])},
        "sum": {"a": 41, "b": (12, [23, 34])},
    }
    with pytest.raises(ValueError, match="at least one leaf"):
        optree_core.tree_transpose_map_with_accessor(lambda a, x: {"x": x}, {})


def test_treespec_frozendict_is_unsupported_with_a_clear_error():
    with pytest.raises(RuntimeError, match="frozendict"):
        optree_core.treespec_frozendict(a=optree_core.treespec_leaf())


def test_tree_replace_nones():
    assert optree_core.tree_replace_nones(0, {"a": None, "b": [1, None, (None,)]}) == {
        "a": 0,
        "b": [1, 0, (0,)],
    }
    assert optree_core.tree_replace_nones(0, None) == 0


def test_tree_partition():
    left, right = optree_core.tree_partition(lambda x: x > 1, {"a": 1, "b": [2, 3]})
    assert left == {"a": None, "b": [2, 3]}
    assert right == {"a": 1, "b": [None, None]}
    left, right = optree_core.tree_partition(lambda x: x % 2 == 0, [1, 2], fillvalue="-")
    assert (left, right) == (["-", 2], [1, "-"])


def test_tree_flatten_one_level_builtin_kinds():
    out = optree_core.tree_flatten_one_level({"b": [1], "a": 2})
    children, metadata, entries, unflatten_func = out
    assert children == [2, [1]]
    assert list(entries) == ["a", "b"]
    assert unflatten_func(metadata, children) == {"b": [1], "a": 2}
    children, metadata, entries, unflatten_func = optree_core.tree_flatten_one_level(
        collections.deque([1, 2], maxlen=3)
    )
    assert children == [1, 2]
    assert metadata == 3
    assert list(entries) == [0, 1]
    rebuilt = unflatten_func(metadata, ["x", "y"])
    assert rebuilt == collections.deque(["x", "y"]) and rebuilt.maxlen == 3
    children, metadata, entries, unflatten_func = optree_core.tree_flatten_one_level(Point(1, 2))
    assert children == [1, 2]
    assert unflatten_func(metadata, [3, 4]) == Point(3, 4)
    children, _, entries, _ = optree_core.tree_flatten_one_level(None)
    assert (list(children), list(entries)) == ([], [])


def test_tree_flatten_one_level_rejects_leaf():
    with pytest.raises(ValueError, match="leaf"):
        optree_core.tree_flatten_one_level(1)


def test_prefix_errors():
    assert optree_core.prefix_errors([1, {"a": 2}], [[3, 4], {"a": (5, 6)}]) == []
    errors = optree_core.prefix_errors({"a": (1, 2), "b": [3]}, {"a": [1, 2], "b": [3]})
    assert len(errors) == 1
    error = errors[0]("tree")
    assert isinstance(error, ValueError)
    message = str(error)
    assert_mentions_path(message, ("a",))
    assert_mentions_all(message, "tuple", "list")


def test_prefix_errors_key_mismatch_names_missing_and_extra_keys():
    errors = optree_core.prefix_errors({"b": {"x": 1}}, {"b": {"y": 3}})
    assert len(errors) == 1
    message = str(errors[0]("tree"))
    assert_mentions_path(message, ("b",))
    assert_mentions_all(message, "'x'", "'y'")


def test_prefix_errors_arity_mismatch_names_counts():
    errors = optree_core.prefix_errors({"a": [1, 2]}, {"a": [1, 2, 3]})
    assert len(errors) == 1
    message = str(errors[0]("tree"))
    assert_mentions_path(message, ("a",))
    assert_mentions_all(message, "2", "3")


# -- robustness: recursion, malformed custom nodes, mutation --------------------------------------


def _nested_lists(depth):
    tree = 1
    for _ in range(depth):
        tree = [tree]
    return tree


@pytest.mark.parametrize("op", ["flatten", "leaves", "structure", "map", "paths"])
def test_cyclic_structure_raises_recursion_error(op):
    cycle = [1]
    cycle.append(cycle)
    selfdict = {}
    selfdict["me"] = selfdict
    funcs = {
        "flatten": optree_core.tree_flatten,
        "leaves": optree_core.tree_leaves,
        "structure": optree_core.tree_structure,
        "map": lambda t: optree_core.tree_map(lambda x: x, t),
        "paths": optree_core.tree_paths,
    }
    for tree in (cycle, selfdict):
        with pytest.raises(RecursionError):
            funcs[op](tree)


def test_over_deep_structure_raises_recursion_error():
    with pytest.raises(RecursionError):
        optree_core.tree_flatten(_nested_lists(50_000))
    with pytest.raises(RecursionError):
        optree_core.tree_flatten_with_path(_nested_lists(50_000))


def test_moderately_deep_structure_works():
    depth = min(500, optree_core.MAX_RECURSION_DEPTH - 10)
    leaves, spec = optree_core.tree_flatten(_nested_lists(depth))
    assert leaves == [1]
    assert spec.num_nodes == depth + 1
    rebuilt = spec.unflatten([2])
    for _ in range(depth):
        rebuilt = rebuilt[0]
    assert rebuilt == 2


def test_deep_custom_node_recursion_raises_recursion_error():
    ns = fresh_namespace()

    class Chain:
        pass

    # Each flatten call returns a fresh Chain child: infinitely deep, never cyclic by identity.
    optree_core.register_pytree_node(
        Chain, lambda c: ([Chain()], None), lambda m, ch: Chain(), namespace=ns
    )
    with pytest.raises(RecursionError):
        optree_core.tree_flatten(Chain(), namespace=ns)


def test_interpreter_recursion_limit_is_still_usable_after_recursion_error():
    cycle = []
    cycle.append(cycle)
    with pytest.raises(RecursionError):
        optree_core.tree_leaves(cycle)
    assert optree_core.tree_leaves([[1], [2, [3]]]) == [1, 2, 3]
    assert sys.getrecursionlimit() > 0


class _Node:
    def __init__(self, *values):
        self.values = values


def _register_flatten(flatten, unflatten=None):
    ns = fresh_namespace("malformed")
    cls = type("Malformed", (_Node,), {})
    if unflatten is None:
        unflatten = lambda meta, children: cls(*children)  # noqa: E731
    optree_core.register_pytree_node(cls, flatten, unflatten, namespace=ns)
    return cls, ns


@pytest.mark.parametrize(
    "bad_output",
    [
        pytest.param(5, id="not-a-tuple"),
        pytest.param((1, None), id="children-not-iterable"),
        pytest.param(([1], None, ["a", "b"]), id="entries-length-mismatch"),
        pytest.param(([1], None, ["a"], 4), id="four-tuple"),
        pytest.param(([1],), id="one-tuple"),
        pytest.param((), id="empty-tuple"),
        pytest.param(None, id="none"),
    ],
)
def test_malformed_flatten_output_raises_clear_error(bad_output):
    cls, ns = _register_flatten(lambda node: bad_output)
    # A tuple of the wrong length is a RuntimeError, as in optree; other shapes TypeError/ValueError.
    with pytest.raises((TypeError, ValueError, RuntimeError)) as info:
        optree_core.tree_flatten([cls()], namespace=ns)
    assert info.value.args and str(info.value), "the error must say what is wrong"


def test_malformed_flatten_message_names_the_type():
    cls, ns = _register_flatten(lambda node: ([1, 2], None, ["only-one"]))
    with pytest.raises(RuntimeError, match="inconsistent number of children") as info:
        optree_core.tree_leaves(cls(), namespace=ns)
    assert "Malformed" in str(info.value)


def test_flatten_function_exception_is_reraised_unchanged():
    class Boom(Exception):
        pass

    def flatten(node):
        raise Boom("user flatten failed")

    cls, ns = _register_flatten(flatten)
    with pytest.raises(Boom, match="user flatten failed"):
        optree_core.tree_flatten({"a": [cls()]}, namespace=ns)
    with pytest.raises(Boom):
        optree_core.tree_map(lambda x: x, [cls()], namespace=ns)


def test_unflatten_function_exception_is_reraised_unchanged():
    def unflatten(meta, children):
        raise LookupError("user unflatten failed")

    cls, ns = _register_flatten(lambda node: (node.values, None), unflatten)
    spec = optree_core.tree_structure(cls(1, 2), namespace=ns)
    with pytest.raises(LookupError, match="user unflatten failed"):
        spec.unflatten([1, 2])
    with pytest.raises(LookupError):
        optree_core.tree_map(lambda x: x, cls(1, 2), namespace=ns)


def test_flatten_function_may_return_any_iterable_of_children():
    for make in (tuple, list, iter, lambda v: (x for x in v)):
        cls, ns = _register_flatten(lambda node, make=make: (make(node.values), None))
        assert optree_core.tree_leaves(cls(1, [2]), namespace=ns) == [1, 2]


def test_flatten_that_shrinks_a_list_being_flattened_does_not_crash():
    target = [1, 2, 3, 4]

    def flatten(node):
        target.clear()
        return (), None

    cls, ns = _register_flatten(flatten)
    target[:] = [cls(), 2, 3, 4]
    try:
        leaves, spec = optree_core.tree_flatten(target, namespace=ns)
    except (TypeError, ValueError, RuntimeError, IndexError):
        pass  # a clear Python error is acceptable; a crash or garbage is not
    else:
        assert spec.num_leaves == len(leaves)
        assert isinstance(spec.unflatten(leaves), list)


def test_flatten_that_grows_a_list_being_flattened_stays_consistent():
    target = []

    def flatten(node):
        target.extend([5] * 100)
        return (), None

    cls, ns = _register_flatten(flatten)
    target[:] = [cls(), 1]
    try:
        leaves, spec = optree_core.tree_flatten(target, namespace=ns)
    except (TypeError, ValueError, RuntimeError):
        return
    # Children are read once, before or after the mutation, never half of each.
    assert spec.num_leaves == len(leaves)
    assert leaves in ([1], [1] + [5] * 100)
    assert isinstance(spec.unflatten(leaves), list)


def test_flatten_that_mutates_a_dict_being_flattened_stays_consistent():
    shared = {"a": 1, "b": 2, "c": 3}

    def flatten(node):
        shared.pop("b", None)
        shared["zz"] = 26
        return (), None

    cls, ns = _register_flatten(flatten)
    try:
        leaves, spec = optree_core.tree_flatten({"a": cls(), "b": shared}, namespace=ns)
    except (TypeError, ValueError, RuntimeError, KeyError):
        return
    assert spec.num_leaves == len(leaves)
    assert spec.unflatten(leaves)["b"].keys() == set(spec.child(1).entries())


def test_objects_with_broken_eq_and_hash_as_leaves():
    class Weird:
        def __eq__(self, other):
            raise RuntimeError("no eq")

        __hash__ = None

    w = Weird()
    leaves, spec = optree_core.tree_flatten({"a": [w]})
    assert leaves[0] is w
    assert spec.unflatten([w])["a"][0] is w


def test_dict_keys_that_cannot_be_ordered_keep_insertion_order():
    class Key:
        def __init__(self, n):
            self.n = n

        def __lt__(self, other):
            raise TypeError("no ordering")

        def __hash__(self):
            return self.n

        def __eq__(self, other):
            return isinstance(other, Key) and other.n == self.n

        def __repr__(self):
            return f"Key({self.n})"

    k2, k1 = Key(2), Key(1)
    leaves, spec = optree_core.tree_flatten({k2: "two", k1: "one"})
    assert leaves == ["two", "one"]
    assert spec.entries() == [k2, k1]
    assert spec.unflatten(leaves) == {k2: "two", k1: "one"}


def test_dict_key_comparison_error_other_than_type_error_is_reraised():
    class Key:
        def __init__(self, n):
            self.n = n

        def __lt__(self, other):
            raise ArithmeticError("user comparison failed")

        def __hash__(self):
            return self.n

    with pytest.raises(ArithmeticError, match="user comparison failed"):
        optree_core.tree_flatten({Key(2): "two", Key(1): "one"})


def test_subclasses_of_builtins_are_leaves_unless_namedtuple():
    class MyList(list):
        pass

    class MyDict(dict):
        pass

    assert optree_core.tree_leaves([MyList([1, 2]), MyDict(a=1)]) == [MyList([1, 2]), MyDict(a=1)]

    class SubPoint(Point):
        pass

    assert optree_core.tree_leaves(SubPoint(1, 2)) == [1, 2]
    assert optree_core.tree_structure(SubPoint(1, 2)).type is SubPoint


def test_keyword_arguments_are_keyword_only_where_optree_says():
    with pytest.raises(TypeError):
        optree_core.tree_flatten([1], None, True)  # none_is_leaf is keyword-only
    with pytest.raises(TypeError):
        optree_core.tree_all([1], None)  # is_leaf is keyword-only in tree_all


# -- reference counting: no leaks on success or failure -------------------------------------------


def _refcount_stable(leaf, action, rounds=200):
    action()  # warm caches
    gc.collect()
    before = sys.getrefcount(leaf)
    for _ in range(rounds):
        action()
    gc.collect()
    return sys.getrefcount(leaf) - before


def test_flatten_unflatten_map_do_not_leak_leaf_references():
    leaf = object()
    tree = {"a": [leaf, (leaf, None)], "b": collections.OrderedDict(x=leaf)}
    leaves, spec = optree_core.tree_flatten(tree)

    def action():
        optree_core.tree_flatten(tree)
        optree_core.tree_flatten_with_path(tree)
        spec.unflatten(leaves)
        optree_core.tree_map(lambda x: x, tree)
        optree_core.tree_leaves(tree)

    assert _refcount_stable(leaf, action) == 0


def test_failed_calls_do_not_leak_references():
    leaf = object()
    tree = {"a": [leaf, leaf], "b": leaf}
    spec = optree_core.tree_structure(tree)

    def action():
        with pytest.raises(ValueError):
            spec.unflatten([leaf, leaf])
        with pytest.raises(ValueError):
            spec.unflatten([leaf] * 4)
        with pytest.raises(ValueError):
            optree_core.tree_map(lambda x, y: x, tree, {"a": [leaf], "b": leaf})
        with pytest.raises(ZeroDivisionError):
            optree_core.tree_map(lambda x: 1 / 0, tree)

    assert _refcount_stable(leaf, action) == 0


def test_dict_keys_and_metadata_are_released_with_the_spec():
    class Key(str):
        pass

    key = Key("k")
    ref = weakref.ref(key)
    spec = optree_core.tree_structure({key: 1})
    del key
    gc.collect()
    assert ref() is not None, "the spec must keep its dict keys alive"
    assert spec.unflatten([2]) == {"k": 2}
    del spec
    gc.collect()
    assert ref() is None, "dropping the spec must release its dict keys"


def test_failed_unflatten_leaves_the_spec_usable():
    spec = optree_core.tree_structure({"a": [1, 2], "b": (3,)})

    def leaves_then_boom():
        yield 1
        raise KeyError("iterator failed")

    with pytest.raises(KeyError):
        spec.unflatten(leaves_then_boom())
    assert spec.unflatten([4, 5, 6]) == {"a": [4, 5], "b": (6,)}
    assert spec.num_leaves == 3


# -- more literal semantics ---------------------------------------------------------------------


def test_rests_may_have_none_where_the_first_tree_has_a_leaf():
    out = optree_core.tree_map(lambda x, y: (x, y), [1, 2], [None, 3])
    assert out == [(1, None), (2, 3)]


def test_is_leaf_sees_none_before_it_becomes_a_node():
    assert optree_core.tree_leaves([None, 1], is_leaf=lambda x: x is None) == [None, 1]
    assert optree_core.tree_leaves([None, (None,)], is_leaf=lambda x: isinstance(x, tuple)) == [
        (None,)
    ]
    paths, leaves, _ = optree_core.tree_flatten_with_path(
        {"a": [1, [2]], "b": 3}, is_leaf=lambda x: x == [2]
    )
    assert (paths, leaves) == ([("a", 0), ("a", 1), ("b",)], [1, [2], 3])


def test_is_leaf_truthy_non_bool_result_counts_as_true():
    assert optree_core.tree_leaves([[1], [2]], is_leaf=lambda x: 1 if x == [1] else 0) == [[1], 2]


def test_tree_map_with_is_leaf_and_several_trees():
    out = optree_core.tree_map(
        lambda x, y: (x, y),
        {"a": [1, 2], "b": 3},
        {"a": "A", "b": "B"},
        is_leaf=lambda x: isinstance(x, list),
    )
    assert out == {"a": ([1, 2], "A"), "b": (3, "B")}


def test_dict_key_equality_error_in_tree_map_is_reraised():
    class Key:
        def __init__(self, n):
            self.n = n

        def __hash__(self):
            return 1

        def __eq__(self, other):
            raise ArithmeticError("key equality failed")

        def __lt__(self, other):
            return self.n < other.n

    with pytest.raises(ArithmeticError, match="key equality failed"):
        optree_core.tree_map(lambda a, b: a, {Key(1): 1}, {Key(2): 1})


def test_wide_tree_of_100k_leaves():
    tree = {"w": list(range(100_000)), "t": tuple(range(10))}
    leaves, spec = optree_core.tree_flatten(tree)
    assert leaves == list(range(10)) + list(range(100_000))
    assert spec.num_nodes == 100_000 + 10 + 3
    assert spec.unflatten(leaves) == tree


# -- crashes are checked in a subprocess, so a segfault is a failed test, not a dead run -----------


def _run_isolated(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_near_limit_depth_in_a_thread_never_crashes():
    result = _run_isolated(
        """
        import copy, pickle, threading, optree_core
        depth = optree_core.MAX_RECURSION_DEPTH - 5
        errors = []

        def build(depth):
            tree = 1
            for i in range(depth):
                tree = [tree] if i % 3 else ({"k": tree} if i % 2 else (tree,))
            return tree

        def run():
            try:
                tree = build(depth)
                try:
                    leaves, spec = optree_core.tree_flatten(tree)
                except RecursionError:
                    return
                spec.unflatten(leaves)
                optree_core.tree_map(lambda x: x, tree)
                optree_core.tree_flatten_with_path(tree)
                for op in (repr, hash, pickle.dumps, copy.deepcopy, lambda s: s == s,
                           lambda s: s.is_prefix(s), lambda s: s.paths()):
                    try:
                        op(spec)
                    except RecursionError:
                        pass
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=run)
        t.start()
        t.join()
        print("errors:", errors)
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "errors: []" in result.stdout, result.stdout + result.stderr[-3000:]


def test_beyond_limit_depth_in_a_thread_raises_recursion_error():
    result = _run_isolated(
        """
        import threading, optree_core
        out = []

        def run():
            tree = 1
            for _ in range(optree_core.MAX_RECURSION_DEPTH + 50):
                tree = [tree]
            try:
                optree_core.tree_flatten(tree)
                out.append("no error")
            except RecursionError:
                out.append("RecursionError")

        t = threading.Thread(target=run)
        t.start()
        t.join()
        print(out)
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "['RecursionError']" in result.stdout


def test_defaultdict_without_factory_round_trips():
    tree = collections.defaultdict(None, {"b": 1, "a": 2})
    leaves, spec = optree_core.tree_flatten(tree)
    assert leaves == [2, 1]
    assert repr(spec) == "PyTreeSpec(defaultdict(None, {'a': *, 'b': *}))"
    rebuilt = spec.unflatten([3, 4])
    assert type(rebuilt) is collections.defaultdict
    assert rebuilt.default_factory is None
    assert list(rebuilt.items()) == [("b", 4), ("a", 3)]


def test_tree_sum_adds_any_leaves_with_plus():
    # optree folds with +, so strings and other non-numbers sum as they add.
    assert optree_core.tree_sum({"b": "y", "a": "x"}, start="") == "xy"
    assert optree_core.tree_sum([(1,), (2,)], start=(), is_leaf=lambda x: isinstance(x, tuple)) == (
        1,
        2,
    )


def test_tree_broadcast_map_mismatch_says_where_and_what():
    with pytest.raises(ValueError) as info:
        optree_core.tree_broadcast_map(
            lambda a, b: a, {"x": {"y": [1, 2]}}, {"x": {"y": [1, 2, 3]}}
        )
    message = str(info.value)
    assert_mentions_path(message, ("x", "y"))
    assert_mentions_all(message, "2", "3")


def test_tree_iter_is_lazy_and_its_iterator_can_be_a_leaf_of_the_tree():
    tree = {"a": 1, "b": {"c": 2}}
    it = optree_core.tree_iter(tree)
    assert next(it) == 1
    tree["b"]["d"] = it  # reached later: it is a leaf there
    tree["z"] = 3  # the root was already taken apart: not seen
    assert list(it) == [2, it]
    ref = weakref.ref(it)
    del it, tree
    gc.collect()
    assert ref() is None


def test_tree_iter_matches_tree_leaves_and_asks_is_leaf_once_per_node():
    tree = [1, (2, None), {"b": [3], "a": Point(4, 5)}, collections.deque([6])]
    asked = []
    leaves = list(optree_core.tree_iter(tree, is_leaf=lambda x: asked.append(x) or False))
    assert leaves == optree_core.tree_leaves(tree) == [1, 2, 4, 5, 3, 6]
    assert len(asked) == 13  # each node and each leaf, once
    assert list(optree_core.tree_iter(tree, none_is_leaf=True)) == [1, 2, None, 4, 5, 3, 6]
    deep = 0
    for _ in range(optree_core.MAX_RECURSION_DEPTH + 5):
        deep = [deep]
    with pytest.raises(RecursionError):
        list(optree_core.tree_iter(deep))


def test_tree_iter_called_again_from_inside_its_own_step_raises_runtime_error():
    it = None
    refused = []

    def is_leaf(node):
        if node == 2:
            with pytest.raises(RuntimeError, match="already"):
                next(it)
            refused.append(node)
        return False

    it = optree_core.tree_iter([1, 2, [3]], is_leaf=is_leaf)
    assert list(it) == [1, 2, 3] and refused == [2]  # the walk goes on afterwards


def test_tree_flatten_one_level_names_type_and_kind():
    out = optree_core.tree_flatten_one_level(Point(1, [2]))
    children, metadata, entries, unflatten = out
    assert (children, metadata, entries) == ([1, [2]], Point, (0, 1))
    assert out.type is Point and out.kind == optree_core.PyTreeKind.NAMEDTUPLE
    assert unflatten(metadata, children) == Point(1, [2])


def test_tree_transpose_checks_leaf_counts_where_custom_metadata_changed():
    ns = fresh_namespace("transpose")

    class Cached:  # its metadata is the spec of its content, which mapping changes
        def __init__(self, content):
            self.leaves, self.spec = optree_core.tree_flatten(content)

    other_ns = fresh_namespace("other")
    for namespace in (ns, other_ns):
        optree_core.register_pytree_node(
            Cached, lambda c: (c.leaves, c.spec),
            lambda spec, children: Cached(spec.unflatten(children)), namespace=namespace)
    try:
        outer = optree_core.tree_structure(Cached({"a": 1, "b": 2}), namespace=ns)
        inner = optree_core.tree_structure([0, 0])
        nested = Cached({"a": [1, 2], "b": [3, 4]})  # metadata {'a': [*, *], ...}, not {'a': *}
        out = optree_core.tree_transpose(outer, inner, nested)
        assert [c.spec.unflatten(c.leaves) for c in out] == [{"a": 1, "b": 3}, {"a": 2, "b": 4}]
        with pytest.raises(TypeError, match="expected 2 x 2 leaves"):
            optree_core.tree_transpose(outer, inner, Cached({"a": [1, 2], "b": [3]}))
        other = optree_core.tree_structure(Cached([0, 0]), namespace=other_ns)
        with pytest.raises(ValueError, match="same namespace"):
            optree_core.tree_transpose(outer, other, nested)
    finally:
        for namespace in (ns, other_ns):
            optree_core.unregister_pytree_node(Cached, namespace=namespace)


def test_tree_transpose_map_keeps_what_sits_at_inner_leaves_whole():
    x = ((1, 2), [3])
    y = ((0, {"k": 5}), [(6, [None])])  # the first result sets the inner spec
    out = optree_core.tree_transpose_map(lambda a, b: {"a": a, "b": b}, x, y)
    assert out == {"a": ((1, 2), [3]), "b": ((0, {"k": 5}), [(6, [None])])}
    with pytest.raises(ValueError, match="inner structure"):
        optree_core.tree_transpose_map(lambda a: (), (1,))


def test_none_unflatten_of_the_registry_view_rejects_children():
    from optree_core.registry import _NODETYPE_REGISTRY

    entry = _NODETYPE_REGISTRY[type(None)]
    assert entry.unflatten_func(None, []) is None
    with pytest.raises(ValueError, match="None has no children"):
        entry.unflatten_func(None, [1])
    out = optree_core.tree_flatten_one_level([1, 2])
    assert out.path_entry_type is optree_core.SequenceEntry


def test_list_shrunk_by_is_leaf_raises_index_error():
    items = [0, 1, 2, 3]

    def is_leaf(x):
        if x == 0:
            del items[1:]
        return False

    with pytest.raises(IndexError, match="shrank"):
        optree_core.tree_flatten(items, is_leaf=is_leaf)
    assert items == [0]


def test_transpose_map_moves_whole_subtrees_below_the_inner_leaves():
    x = ((1, 2), (3,))
    y = ((6, [None]), ({"foo": "bar"},))
    out = optree_core.tree_transpose_map(lambda a, b: {"a": a, "b": b}, x, y)
    assert out == {"a": ((1, 2), (3,)), "b": ((6, [None]), ({"foo": "bar"},))}
    with pytest.raises(ValueError, match="inner structure must have at least one leaf"):
        optree_core.tree_transpose_map(lambda a: None, [1])
    spec = optree_core.tree_structure({"p": 0, "q": 0})
    assert optree_core.tree_transpose_map(lambda a: a, [], inner_treespec=spec) == {"p": [], "q": []}


def test_transpose_checks_namespaces_and_leaf_counts():
    outer = optree_core.tree_structure({"a": 1, "b": 2, "c": 3})
    inner = optree_core.tree_structure([1, 2])
    with pytest.raises(TypeError, match="mismatch"):
        optree_core.tree_transpose(outer, inner, {"a": [1, 2], "b": [3, 4]})
    outer = optree_core.tree_structure([0, 0])
    with pytest.raises(TypeError, match="outer path"):  # matching outer, unequal inner subtrees
        optree_core.tree_transpose(outer, inner, [(1, 2, 3), (4,)])


def test_one_level_none_rebuilds_only_without_children():
    out = optree_core.tree_flatten_one_level(None)
    assert out.unflatten_func(out.metadata, []) is None
    with pytest.raises(ValueError, match="no children"):
        out.unflatten_func(out.metadata, [1])


def test_broadcast_map_of_one_tree_flattens_it_once():
    ns = fresh_namespace("one-shot")
    calls = []

    class Once:
        def __init__(self, x):
            self.x = x

    optree_core.register_pytree_node(Once, lambda o: calls.append(o) or ((o.x,), None),
                                     lambda _, c: Once(*c), namespace=ns)
    try:
        for broadcast_map, func in ((optree_core.tree_broadcast_map, lambda x: x + 1),
                                    (optree_core.tree_broadcast_map_with_path,
                                     lambda p, x: (p, x + 1))):
            calls.clear()
            out = broadcast_map(func, Once(1), namespace=ns)
            assert len(calls) == 1 and out.x in (2, ((0,), 2))
    finally:
        optree_core.unregister_pytree_node(Once, namespace=ns)


def test_tree_iter_keeps_the_dict_order_in_effect_when_it_was_created():
    from optree_core.registry import GLOBAL_NAMESPACE

    tree = {"b": 1, "a": {"d": 2, "c": 3}}
    with optree_core.dict_insertion_ordered(True, namespace=GLOBAL_NAMESPACE):
        ordered = optree_core.tree_iter(tree)
    assert list(ordered) == [1, 2, 3]
    sorted_it = optree_core.tree_iter(tree)
    with optree_core.dict_insertion_ordered(True, namespace=GLOBAL_NAMESPACE):
        assert list(sorted_it) == [3, 2, 1]

