"""PyTreeSpec: its accessors, structural methods, constructors, predicates, equality, hashing,
pickling and repr."""

from __future__ import annotations

import collections
import contextlib
import copy
import pickle

import pytest
from helpers import (
    REFERENCE_NAMESPACE,
    Pair,
    Point,
    assert_mentions_all,
    assert_mentions_path,
    sample_cases,
    struct_time,
)

import optree_core

LEAF = optree_core.treespec_leaf()
NONE = optree_core.treespec_none()


def spec_of(tree, **kwargs):
    return optree_core.tree_structure(tree, **kwargs)


# -- basic properties -----------------------------------------------------------------------------


def test_counts_children_and_child():
    spec = spec_of({"a": [1, 2], "b": (3, {"c": 4})})
    assert (spec.num_leaves, spec.num_nodes, spec.num_children) == (4, 8, 2)
    assert spec.children() == [spec_of([0, 0]), spec_of((0, {"c": 0}))]
    assert spec.child(1) == spec_of((0, {"c": 0}))
    assert spec.child(-1) == spec.child(1)
    with pytest.raises(IndexError):
        spec.child(2)
    with pytest.raises(IndexError):
        spec.child(-3)
    assert spec_of(1).children() == []
    assert spec_of(None).num_children == 0


def test_kind_and_type_of_every_builtin():
    K = optree_core.PyTreeKind
    table = [
        (1, K.LEAF, None),
        (None, K.NONE, type(None)),
        ((1,), K.TUPLE, tuple),
        ([1], K.LIST, list),
        ({"a": 1}, K.DICT, dict),
        (Point(1, 2), K.NAMEDTUPLE, Point),
        (collections.OrderedDict(a=1), K.ORDEREDDICT, collections.OrderedDict),
        (collections.defaultdict(int, a=1), K.DEFAULTDICT, collections.defaultdict),
        (collections.deque([1]), K.DEQUE, collections.deque),
        (struct_time(), K.STRUCTSEQUENCE, type(struct_time())),
    ]
    for tree, kind, typ in table:
        spec = spec_of(tree)
        assert spec.kind == kind, tree
        assert spec.type is typ, tree
    custom = spec_of(Pair(1, 2), namespace=REFERENCE_NAMESPACE)
    assert custom.kind == K.CUSTOM
    assert custom.type is Pair


def test_pytreekind_members():
    names = {
        "CUSTOM",
        "LEAF",
        "NONE",
        "TUPLE",
        "LIST",
        "DICT",
        "NAMEDTUPLE",
        "ORDEREDDICT",
        "DEFAULTDICT",
        "DEQUE",
        "STRUCTSEQUENCE",
    }
    assert names <= set(optree_core.PyTreeKind.__members__)
    assert optree_core.PyTreeKind.LEAF != optree_core.PyTreeKind.NONE


def test_entries_paths_and_entry():
    spec = spec_of({"b": [1, (2,)], "a": 3})
    assert spec.entries() == ["a", "b"]
    assert spec.entry(1) == "b"
    assert spec.paths() == [("a",), ("b", 0), ("b", 1, 0)]
    assert spec_of(collections.OrderedDict(b=1, a=2)).entries() == ["b", "a"]
    assert spec_of([4, 5, 6]).entries() == [0, 1, 2]
    assert spec_of(1).entries() == []
    assert spec_of(1).paths() == [()]
    with pytest.raises(IndexError):
        spec.entry(2)


def test_is_leaf_and_is_strict_leaf():
    assert spec_of(1).is_leaf()
    assert not spec_of(None).is_leaf()
    assert spec_of(None, none_is_leaf=True).is_leaf()
    assert optree_core.treespec_is_leaf(LEAF)
    assert not optree_core.treespec_is_leaf(NONE)
    assert optree_core.treespec_is_strict_leaf(LEAF)
    assert not optree_core.treespec_is_strict_leaf(NONE)
    assert not optree_core.treespec_is_leaf(spec_of([1]))


def test_none_is_leaf_and_namespace_attributes():
    assert spec_of([1]).none_is_leaf is False
    assert spec_of([1], none_is_leaf=True).none_is_leaf is True
    assert spec_of([1]).namespace == ""
    custom = spec_of([Pair(1, 2)], namespace=REFERENCE_NAMESPACE)
    assert custom.namespace == REFERENCE_NAMESPACE
    # A spec without custom nodes does not keep the namespace it was made in.
    assert spec_of([1], namespace=REFERENCE_NAMESPACE).namespace == ""


# -- unflatten / flatten_up_to ------------------------------------------------------------------


def test_unflatten_method():
    spec = spec_of({"b": (1, None), "a": [2]})
    assert spec.unflatten(["A", "B"]) == {"b": ("B", None), "a": ["A"]}


def test_flatten_up_to():
    spec = spec_of({"a": [1, 2], "b": (3, {"c": 4})})
    full = {"a": [[1], 2], "b": (3, {"c": (4, 5)})}
    assert spec.flatten_up_to(full) == [[1], 2, 3, (4, 5)]


def test_flatten_up_to_mismatch_raises_value_error_naming_the_difference():
    spec = spec_of({"a": [1, 2], "b": (3, {"c": 4})})
    with pytest.raises(ValueError) as info:
        spec.flatten_up_to({"a": [[1], 2], "b": (3, {"d": 4})})
    assert_mentions_all(str(info.value), "'c'", "'d'")
    with pytest.raises(ValueError) as info:
        spec.flatten_up_to({"a": [1, 2], "b": [3, {"c": 4}]})
    assert_mentions_all(str(info.value), "tuple")
    with pytest.raises(ValueError):
        spec.flatten_up_to({"a": [1, 2, 3], "b": (3, {"c": 4})})


# -- prefix / suffix / compose / broadcast --------------------------------------------------------


def test_is_prefix_and_is_suffix():
    full = spec_of({"a": [1, 2], "b": (3, 4)})
    prefix = spec_of({"a": 0, "b": 0})
    assert prefix.is_prefix(full)
    assert not full.is_prefix(prefix)
    assert full.is_suffix(prefix)
    assert not prefix.is_suffix(full)
    assert full.is_prefix(full)
    assert not full.is_prefix(full, strict=True)
    assert prefix.is_prefix(full, strict=True)
    assert LEAF.is_prefix(full)
    assert optree_core.treespec_is_prefix(prefix, full)
    assert optree_core.treespec_is_suffix(full, prefix)
    assert not spec_of({"a": 0, "c": 0}).is_prefix(full)
    assert not spec_of([0, 0]).is_prefix(spec_of((0, 0)))


def test_compose():
    outer = spec_of({"a": 0, "b": [0]})
    inner = spec_of((0, None, [0]))
    composed = outer.compose(inner)
    assert composed == spec_of({"a": (0, None, [0]), "b": [(0, None, [0])]})
    assert composed.num_leaves == outer.num_leaves * inner.num_leaves
    assert composed.num_nodes == outer.num_nodes + outer.num_leaves * (inner.num_nodes - 1)


def test_compose_rejects_mixed_none_is_leaf():
    with pytest.raises(ValueError):
        spec_of([0]).compose(spec_of((0,), none_is_leaf=True))


def test_broadcast_to_common_suffix():
    left = spec_of([1, [2, 3]])
    right = spec_of([[4, 5], 6])
    common = left.broadcast_to_common_suffix(right)
    assert common == spec_of([[0, 0], [0, 0]])
    assert right.broadcast_to_common_suffix(left) == common
    with pytest.raises(ValueError):
        left.broadcast_to_common_suffix(spec_of([[4, 5], 6, 7]))


def test_broadcast_to_common_suffix_mismatch_says_where_and_what():
    with pytest.raises(ValueError) as info:
        spec_of({"x": [1, 2]}).broadcast_to_common_suffix(spec_of({"x": [1, 2, 3]}))
    message = str(info.value)
    assert_mentions_path(message, ("x",))
    assert_mentions_all(message, "2", "3")


# -- equality, ordering, hashing, pickling, copying, repr ------------------------------------------


def test_equality_and_hash():
    a = spec_of({"a": [1, 2], "b": None})
    b = spec_of({"b": None, "a": [3, 4]})
    assert a == b
    assert hash(a) == hash(b)
    assert a != spec_of({"a": [1, 2], "b": 1})
    assert a != spec_of({"a": (1, 2), "b": None})
    assert a != spec_of({"a": [1, 2], "b": None}, none_is_leaf=True)
    assert len({a, b, spec_of([1])}) == 2
    assert (a == 1) is False
    assert a != "PyTreeSpec"


def test_structural_ordering_is_prefix_order():
    full = spec_of({"a": [1, 2], "b": 3})
    prefix = spec_of({"a": 0, "b": 0})
    assert prefix < full
    assert prefix <= full
    assert full > prefix
    assert full >= full
    assert not full < full


def test_custom_node_metadata_is_part_of_equality_and_hash():
    p = spec_of(Pair(1, 2, tag="p"), namespace=REFERENCE_NAMESPACE)
    q = spec_of(Pair(1, 2, tag="q"), namespace=REFERENCE_NAMESPACE)
    assert p != q
    assert p == spec_of(Pair(5, 6, tag="p"), namespace=REFERENCE_NAMESPACE)
    assert hash(p) == hash(spec_of(Pair(5, 6, tag="p"), namespace=REFERENCE_NAMESPACE))


def test_spec_with_unhashable_metadata_compares_without_crashing():
    ns = REFERENCE_NAMESPACE
    spec = spec_of(Pair(1, 2, tag=["unhashable"]), namespace=ns)  # type: ignore[arg-type]
    # optree hashes only what it can; raising TypeError is also acceptable.
    with contextlib.suppress(TypeError):
        hash(spec)
    assert spec == spec_of(Pair(3, 4, tag=["unhashable"]), namespace=ns)  # type: ignore[arg-type]
    assert spec != spec_of(Pair(3, 4, tag=["other"]), namespace=ns)  # type: ignore[arg-type]


@pytest.mark.parametrize("case", sample_cases(), ids=lambda c: repr(c.tree)[:30])
def test_pickle_round_trip_of_builtin_specs(case):
    spec = spec_of(case.tree)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        clone = pickle.loads(pickle.dumps(spec, protocol=protocol))
        assert clone == spec
        assert hash(clone) == hash(spec)
        assert repr(clone) == repr(spec)
        assert clone.unflatten(case.leaves) == case.tree


def test_pickle_keeps_none_is_leaf_namespace_and_dict_order():
    spec = spec_of({"b": None, "a": [Pair(1, 2)]}, none_is_leaf=True, namespace=REFERENCE_NAMESPACE)
    clone = pickle.loads(pickle.dumps(spec))
    assert clone == spec
    assert clone.none_is_leaf
    assert clone.namespace == REFERENCE_NAMESPACE
    rebuilt = clone.unflatten([1, 2, None])
    assert list(rebuilt) == ["b", "a"]
    assert rebuilt == {"b": None, "a": [Pair(1, 2)]}
    deque_spec = pickle.loads(pickle.dumps(spec_of(collections.deque([1], maxlen=7))))
    assert deque_spec.unflatten([0]).maxlen == 7
    dd = pickle.loads(pickle.dumps(spec_of(collections.defaultdict(list, a=1))))
    assert dd.unflatten([0]).default_factory is list


def test_copy_and_deepcopy():
    spec = spec_of({"a": [1, (2, None)]})
    assert copy.copy(spec) == spec
    assert copy.deepcopy(spec) == spec


def test_repr_of_builtins():
    for case in sample_cases():
        assert repr(spec_of(case.tree)) == case.repr
        assert str(spec_of(case.tree)) == case.repr


def test_repr_of_custom_node_and_namespace():
    spec = spec_of([Pair(1, [2], tag="p")], namespace=REFERENCE_NAMESPACE)
    assert repr(spec) == (
        f"PyTreeSpec([CustomTreeNode(Pair['p'], [*, [*]])], namespace={REFERENCE_NAMESPACE!r})"
    )


def test_repr_with_none_is_leaf():
    assert repr(spec_of([None, 1], none_is_leaf=True)) == "PyTreeSpec([*, *], NoneIsLeaf)"
    assert repr(spec_of(None, none_is_leaf=True)) == "PyTreeSpec(*, NoneIsLeaf)"


def test_repr_of_deep_spec_does_not_crash():
    tree = 0
    for _ in range(200):
        tree = [tree]
    assert repr(spec_of(tree)).count("[") == 200


# -- treespec_* constructors --------------------------------------------------------------------


def test_leaf_and_none_constructors():
    assert spec_of(1) == LEAF
    assert spec_of(None) == NONE
    assert optree_core.treespec_leaf(none_is_leaf=True) == spec_of(None, none_is_leaf=True)


def test_container_constructors():
    assert optree_core.treespec_tuple([LEAF, NONE]) == spec_of((1, None))
    assert optree_core.treespec_list([LEAF, LEAF]) == spec_of([1, 2])
    assert optree_core.treespec_tuple() == spec_of(())
    d = optree_core.treespec_dict({"b": LEAF, "a": NONE})
    assert d == spec_of({"a": None, "b": 1})
    assert optree_core.treespec_dict(b=LEAF, a=NONE) == d
    assert optree_core.treespec_namedtuple(Point(LEAF, NONE)) == spec_of(Point(1, None))
    od = optree_core.treespec_ordereddict({"b": LEAF, "a": LEAF})
    assert od == spec_of(collections.OrderedDict(b=1, a=2))
    dd = optree_core.treespec_defaultdict(int, {"b": LEAF})
    assert dd == spec_of(collections.defaultdict(int, b=1))
    dq = optree_core.treespec_deque([LEAF], maxlen=4)
    assert dq == spec_of(collections.deque([1], maxlen=4))
    ss = optree_core.treespec_structseq(struct_time(*([LEAF] * 9)))
    assert ss == spec_of(struct_time())


def test_from_collection_and_nesting():
    nested = optree_core.treespec_list([optree_core.treespec_dict(x=LEAF), LEAF])
    assert nested == spec_of([{"x": 1}, 2])
    assert nested.unflatten([5, 6]) == [{"x": 5}, 6]
    # One level of a collection whose children are all PyTreeSpecs.
    assert optree_core.treespec_from_collection({"a": LEAF, "b": NONE}) == spec_of(
        {"a": 1, "b": None}
    )
    assert optree_core.treespec_from_collection([LEAF, nested]) == spec_of([1, [{"x": 1}, 2]])
    with pytest.raises(ValueError):
        optree_core.treespec_from_collection([LEAF, [LEAF]])


def test_constructors_reject_non_specs_and_mixed_none_is_leaf():
    with pytest.raises((TypeError, ValueError)):
        optree_core.treespec_tuple([LEAF, 1])
    with pytest.raises(ValueError):
        optree_core.treespec_tuple([LEAF, optree_core.treespec_leaf(none_is_leaf=True)])


def test_treespec_function_forms():
    spec = spec_of([1, {"k": 2}])
    assert optree_core.treespec_paths(spec) == [(0,), (1, "k")]
    assert optree_core.treespec_entries(spec) == [0, 1]
    assert optree_core.treespec_entry(spec, 1) == 1
    assert optree_core.treespec_children(spec) == [LEAF, spec_of({"k": 0})]
    assert optree_core.treespec_child(spec, 1) == spec_of({"k": 0})


def test_spec_is_immutable_value():
    spec = spec_of([1, 2])
    with pytest.raises((AttributeError, TypeError)):
        spec.num_leaves = 5  # type: ignore[misc]
    assert spec.num_leaves == 2


def test_repr_of_empty_containers():
    assert repr(spec_of(collections.deque())) == "PyTreeSpec(deque())"
    assert repr(spec_of(collections.deque(maxlen=0))) == "PyTreeSpec(deque(maxlen=0))"
    assert repr(spec_of(collections.OrderedDict())) == "PyTreeSpec(OrderedDict())"
    assert (
        repr(spec_of(collections.defaultdict(int))) == "PyTreeSpec(defaultdict(<class 'int'>, {}))"
    )
    assert repr(spec_of(((),))) == "PyTreeSpec(((),))"


def _corruptions(value):
    """Every copy of a pickle state with one int replaced or one tuple element dropped/added."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, bytes, type)):
        return
    if isinstance(value, int):
        for bad in (-1, 0, 1, value + 1, value - 1, 2**31, 2**62, -(2**63)):
            if bad != value:
                yield bad
        return
    if isinstance(value, (tuple, list)):
        kind = type(value)
        for i, item in enumerate(value):
            for bad in _corruptions(item):
                yield kind([*value[:i], bad, *value[i + 1 :]])
            yield kind([*value[:i], *value[i + 1 :]])
        yield kind([*value, 0])


@pytest.mark.parametrize(
    "tree",
    [
        [1, (2, None)],
        {"b": 1, "a": collections.deque([2], maxlen=3)},
        collections.OrderedDict(b=Point(1, 2)),
        collections.defaultdict(list, k=[1]),
        struct_time(),
        [Pair(1, 2)],
    ],
    ids=["list", "dict-deque", "odict-ntuple", "defaultdict", "structseq", "custom"],
)
def test_corrupted_pickle_states_are_rejected_not_trusted(tree):
    spec = spec_of(tree, namespace=REFERENCE_NAMESPACE)
    reduced = spec.__reduce__()
    constructor, args = reduced[0], reduced[1]
    state = reduced[2] if len(reduced) > 2 else None
    tried = 0
    for bad_args, bad_state in [(a, state) for a in _corruptions(args)] + [
        (args, s) for s in _corruptions(state)
    ]:
        tried += 1
        try:
            rebuilt = constructor(*bad_args)
            if bad_state is not None:
                rebuilt.__setstate__(bad_state)
        except Exception:  # rejecting a corrupted state is exactly right
            continue
        # Whatever was accepted must be a self-consistent spec: these may raise, never crash.
        for probe in (
            repr,
            hash,
            lambda s: s.unflatten(range(s.num_leaves)),
            lambda s: s.paths(),
            lambda s: s.children(),
            lambda s: s == spec,
            lambda s: pickle.dumps(s),
        ):
            with contextlib.suppress(Exception):
                probe(rebuilt)
    assert tried > 5


# -- prefix semantics across node kinds (optree's rules) ------------------------------------------


def test_strict_prefix_means_prefix_and_not_equal():
    # A leaf is a prefix of anything, None included; strict only excludes equality.
    assert spec_of(1).is_prefix(spec_of(None), strict=True)
    assert spec_of([1]).is_prefix(spec_of([None]), strict=True)
    assert spec_of(1) < spec_of(None)
    assert spec_of(None) > spec_of(1)
    # None is a node: it is not a prefix of a leaf.
    assert not spec_of(None).is_prefix(spec_of(1))
    assert not spec_of([None]).is_prefix(spec_of([1]))
    assert not spec_of(None) < spec_of(1)
    assert spec_of([1]).is_prefix(spec_of([None]))


def test_dict_like_nodes_are_prefix_compatible_by_keys():
    dd = collections.defaultdict
    od = collections.OrderedDict
    # dict, OrderedDict and defaultdict match one another by key set, as tree_map does.
    assert spec_of({"a": 1}).is_prefix(spec_of(dd(int, a=[1])))
    assert spec_of(od(a=1, b=2)).is_prefix(spec_of({"a": [1], "b": 2}))
    assert spec_of(dd(int, a=1)).is_prefix(spec_of(od(a=[1])))
    assert spec_of(od(a=1, b=2)).is_prefix(spec_of(od(b=[1], a=2)))
    assert not spec_of({"a": 1}).is_prefix(spec_of(od(b=1)))
    assert spec_of({"a": 1}).is_suffix(spec_of(od(a=1)))
    assert spec_of({"a": 1}) < spec_of(dd(int, a=[1]))
    # Equality still tells the kinds apart.
    assert spec_of({"a": 1}) != spec_of(od(a=1))


def test_dict_like_nodes_broadcast_together():
    dd = collections.defaultdict
    od = collections.OrderedDict
    assert optree_core.prefix_errors({"a": 1}, dd(int, a=[1, 2])) == []
    assert optree_core.tree_broadcast_map(lambda x, y: x, {"a": 1}, od(a=[1, 2])) == {"a": [1, 1]}
    out = optree_core.tree_broadcast_map(lambda x, y: y, od(a=[1, 2]), {"a": 1})
    assert type(out) is od
    assert out == od(a=[1, 1])
    # The common suffix keeps the node of the deeper side.
    common = spec_of([1, {"a": 1}]).broadcast_to_common_suffix(spec_of([[1, 2], dd(int, a=1)]))
    assert common == spec_of([[1, 2], {"a": 1}])
    common = spec_of([[1, 2], dd(int, a=1)]).broadcast_to_common_suffix(spec_of([1, {"a": 1}]))
    assert common == spec_of([[1, 2], dd(int, a=1)])
    common = spec_of(od(a=[1, 2])).broadcast_to_common_suffix(spec_of({"a": 1}))
    assert common == spec_of(od(a=[1, 2]))
    assert spec_of({"a": 1}).flatten_up_to(od(a=[1, 2])) == [[1, 2]]
    assert spec_of(od(b=1, a=2)).flatten_up_to({"a": 3, "b": 4}) == [4, 3]


def test_same_shape_dict_likes_are_not_strict_prefixes_of_each_other():
    od = collections.OrderedDict
    # optree compares dict-like nodes by keys for prefix purposes, so a dict and an OrderedDict
    # of the same keys and children are prefixes of each other, but neither strictly.
    assert spec_of({"a": 1}).is_prefix(spec_of(od(a=1)))
    assert not spec_of({"a": 1}).is_prefix(spec_of(od(a=1)), strict=True)
    assert not spec_of({"a": 1}) < spec_of(od(a=1))
    assert not spec_of({}) < spec_of(od())
    assert spec_of({"a": 1}) < spec_of(od(a=[1]))


def test_treespec_entry_and_child_wrappers_take_int_like_indices():
    class OnlyIndex:
        def __index__(self):
            return 1

    class OnlyInt:
        def __int__(self):
            return 1

    spec = optree_core.tree_structure({"a": 1, "b": (2, 3)})
    for index in (1, OnlyIndex(), OnlyInt()):
        assert optree_core.treespec_entry(spec, index) == "b"
        assert optree_core.treespec_child(spec, index) == optree_core.tree_structure((2, 3))
    for bad in (1.0, "1"):
        with pytest.raises(TypeError, match="must be an integer"):
            optree_core.treespec_child(spec, bad)


def test_treespec_transform_checks_what_the_callbacks_return():
    spec = optree_core.tree_structure(((1, 2, 3), (4,)))
    assert optree_core.treespec_transform(
        spec, lambda s: optree_core.treespec_list(s.children())
    ) == optree_core.tree_structure([[1, 2, 3], [4]])
    with pytest.raises(TypeError, match="must return a PyTreeSpec"):
        optree_core.treespec_transform(spec, lambda _: None)
    with pytest.raises(TypeError, match="must return a PyTreeSpec"):
        optree_core.treespec_transform(spec, None, lambda _: None)
    with pytest.raises(ValueError, match="children"):
        optree_core.treespec_transform(spec, lambda _: optree_core.tree_structure([0, 1]))
    with pytest.raises(ValueError, match="one-level"):
        optree_core.treespec_transform(
            spec, lambda s: optree_core.tree_structure([None] + [0] * s.num_children))
    with pytest.raises(ValueError, match="none_is_leaf"):
        optree_core.treespec_transform(spec, lambda s: optree_core.treespec_list(
            [optree_core.treespec_leaf(none_is_leaf=True)] * s.num_children, none_is_leaf=True))


def test_treespec_from_collection_of_a_leaf_warns_and_gives_the_leaf_spec():
    for leaf, none_is_leaf in ((1, False), ("text", False), (None, True)):
        with pytest.warns(UserWarning, match="given a leaf"):
            spec = optree_core.treespec_from_collection(leaf, none_is_leaf=none_is_leaf,
                                                        namespace="some-namespace")
        assert spec == optree_core.treespec_leaf(none_is_leaf=none_is_leaf)
        assert spec.namespace == ""
    assert optree_core.treespec_from_collection(None, namespace="ns") == optree_core.treespec_none()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning):
            optree_core.treespec_from_collection(1)
