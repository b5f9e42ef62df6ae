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
    fresh_namespace,
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


def test_num_kinds_counts_the_kinds_without_being_one():
    assert optree_core.PyTreeKind.NUM_KINDS == len(optree_core.PyTreeKind) == 12
    assert "NUM_KINDS" not in optree_core.PyTreeKind.__members__


def test_metaclass_of_pytreespec_can_be_subclassed():
    # As torch.utils._cxx_pytree does with LeafSpecMeta/LeafSpec.
    spec_type = optree_core.PyTreeSpec

    class LeafOnlyMeta(type(spec_type)):
        def __instancecheck__(cls, instance):
            return isinstance(instance, spec_type) and instance.is_leaf()

    class LeafOnly(spec_type, metaclass=LeafOnlyMeta):
        def __new__(cls):
            return optree_core.treespec_leaf()

    assert isinstance(LEAF, LeafOnly)
    assert not isinstance(spec_of([1]), LeafOnly)
    assert LeafOnly() == LEAF and type(LeafOnly()) is spec_type
    assert issubclass(LeafOnly, spec_type) and type(LeafOnly) is LeafOnlyMeta
    # The metaclass of other nanobind extensions is untouched (optree_core has its own domain).
    assert type(spec_type).__name__ == "nb_type"


# -- optree 0.20 semantics: namespaces, state layout, cycles, depth -------------------------------


class Duo:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def __eq__(self, other):
        return type(other) is Duo and (self.a, self.b) == (other.a, other.b)

    __hash__ = None


def register_duo(namespace, reverse=False):
    if reverse:  # the same type, flattened differently
        optree_core.register_pytree_node(Duo, lambda d: ((d.b, d.a), None),
                                         lambda _, c: Duo(c[1], c[0]), namespace=namespace)
    else:
        optree_core.register_pytree_node(Duo, lambda d: ((d.a, d.b), None),
                                         lambda _, c: Duo(*c), namespace=namespace)


@contextlib.contextmanager
def duo_registered(*registrations):
    for namespace, reverse in registrations:
        register_duo(namespace, reverse)
    try:
        yield
    finally:
        for namespace, _ in registrations:
            optree_core.unregister_pytree_node(Duo, namespace=namespace)


def test_spec_records_namespace_for_any_custom_node_and_empty_namespace_matches_any():
    from optree_core.registry import GLOBAL_NAMESPACE

    ns = "ns-record"
    with duo_registered((GLOBAL_NAMESPACE, False)):
        plain = spec_of(Duo(1, 2))
        scoped = spec_of(Duo(1, 2), namespace=ns)
        assert (plain.namespace, scoped.namespace) == ("", ns)
        assert plain == scoped and hash(plain) == hash(scoped)
        assert len({plain, scoped}) == 1
        assert spec_of([1, 2], namespace=ns).namespace == ""  # no custom node: no namespace
        other = spec_of(Duo(1, 2), namespace="ns-other")
        assert other != scoped  # two different namespaces never match


def test_merging_a_global_spec_into_a_namespace_that_rebinds_its_type_is_refused():
    from optree_core.registry import GLOBAL_NAMESPACE

    ns = "ns-rebind"
    with duo_registered((GLOBAL_NAMESPACE, False), (ns, True)):
        outer = spec_of(Duo(0, 0))
        inner = spec_of({"k": Duo(0, 0)}, namespace=ns)
        with pytest.raises(ValueError, match=r"registers .*Duo.* differently"):
            outer.compose(inner)
        with pytest.raises(ValueError, match="differently"):
            spec_of({"k": Duo(0, 0)}).broadcast_to_common_suffix(inner)
        with pytest.raises(ValueError, match="differently"):
            optree_core.treespec_tuple([outer, inner])
        with pytest.raises(ValueError, match="differently"):  # through compose, as optree
            optree_core.tree_transpose(outer, spec_of(Duo(0, 0), namespace=ns), [1, 2, 3])
    with duo_registered((GLOBAL_NAMESPACE, False)):  # only global: resolves the same anywhere
        with optree_core.dict_insertion_ordered(True, namespace="ns-keep"):
            inner = spec_of({"x": 0}, namespace="ns-keep")
        composed = spec_of(Duo(0, 0)).compose(spec_of(Duo(0, 0), namespace="ns-keep"))
        assert composed.namespace == "ns-keep"
        assert composed.unflatten([1, 2, 3, 4]) == Duo(Duo(1, 2), Duo(3, 4))


def test_from_collection_of_a_leaf_warns_and_gives_the_leaf_spec():
    for leaf, none_is_leaf in ((1, False), ("x", True), (None, True)):
        with pytest.warns(UserWarning, match="got a leaf"):
            spec = optree_core.treespec_from_collection(leaf, none_is_leaf=none_is_leaf,
                                                        namespace="ns-leaf")
        assert spec == optree_core.treespec_leaf(none_is_leaf=none_is_leaf)
        assert spec.namespace == ""
    assert optree_core.treespec_from_collection(None) == NONE


def test_is_one_level_needs_every_child_to_be_a_leaf():
    assert spec_of([1, 2]).is_one_level() and optree_core.treespec_is_one_level(spec_of({"a": 1}))
    assert not spec_of([1, None]).is_one_level()  # None is a node
    assert spec_of([1, None], none_is_leaf=True).is_one_level()
    assert not spec_of([1, ()]).is_one_level()
    assert not LEAF.is_one_level()


def test_state_layout_round_trips_and_never_shares_key_lists():
    tree = {"b": 1, "a": collections.defaultdict(list, {"y": 2, "x": 3}), "c": Point(4, 5)}
    spec = spec_of(tree)
    nodes, none_is_leaf, namespace = spec.__getstate__()
    assert (none_is_leaf, namespace) == (False, "")
    root = nodes[-1]
    assert root[0] == optree_core.PyTreeKind.DICT and root[2] == ["a", "b", "c"]
    assert list(root[7]) == ["b", "a", "c"]  # the insertion order, as a dict
    root[2].append("z")  # the state is a copy
    assert spec.unflatten(range(5)) == {"b": 2, "a": {"x": 0, "y": 1}, "c": Point(3, 4)}
    restored = optree_core.PyTreeSpec.__new__(optree_core.PyTreeSpec)
    state = spec.__getstate__()
    restored.__setstate__(state)
    state[0][-1][2].append("z")  # and the restored spec took its own copy
    assert restored == spec and list(restored.unflatten(range(5))) == ["b", "a", "c"]
    # A state written by optree-core 0.1 still loads.
    legacy = (1, tuple((*node[:7], None) for node in spec.__getstate__()[0]), False, "")
    assert optree_core.ops._treespec_from_state(legacy) == spec


def test_malformed_states_raise_runtime_error():
    def load(state):
        spec = optree_core.PyTreeSpec.__new__(optree_core.PyTreeSpec)
        spec.__setstate__(state)
        return spec

    leaf = (int(optree_core.PyTreeKind.LEAF), 0, None, None, None, 1, 1, None)
    point_state = spec_of(Point(1, 2)).__getstate__()
    bad_arity = ((*point_state[0][:2],
                  (int(optree_core.PyTreeKind.NAMEDTUPLE), 3, Point, None, None, 2, 3, None)),
                 False, "")
    custom_tuple = ((leaf, (int(optree_core.PyTreeKind.CUSTOM), 1, None, None, tuple, 1, 2,
                            None)), False, "")
    for state, words in (((leaf,), "3-tuple"), (((leaf[:3],), False, ""), "7- or 8-tuple"),
                         (((leaf, leaf), False, ""), "single tree"),
                         (bad_arity, "does not match the arity"),
                         (custom_tuple, "built-in node type")):
        with pytest.raises(RuntimeError, match=words):
            load(state)


class SelfKey:
    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, SelfKey) and self.value == other.value

    def __hash__(self):
        return hash(self.value)

    def __repr__(self):
        return f"SelfKey({self.value!r})"


def test_spec_reachable_from_its_own_keys_prints_hashes_and_is_collected():
    import gc
    import weakref

    key = SelfKey("a")
    spec = spec_of({key: 0})
    first_hash = hash(spec)
    key.value = spec  # spec -> key list -> key -> spec
    assert repr(spec) == "PyTreeSpec({SelfKey(...): *})"
    assert hash(spec) == hash(spec) != first_hash
    ref = weakref.ref(spec)
    del spec, key
    gc.collect()
    assert ref() is None


def test_cycle_through_an_unregistered_custom_type_is_collected():
    import gc
    import weakref

    ns = "ns-gc"
    cyclic = type("Cyclic", (), {})
    optree_core.register_pytree_node(cyclic, lambda _: ((), None), lambda *_: None,
                                     namespace=ns)
    # Two nodes of one spec share the registration. (Two specs sharing it keep a cycle alive, as
    # in optree: neither can see the other's references.)
    cyclic.spec = spec_of([cyclic(), cyclic()], namespace=ns)
    optree_core.unregister_pytree_node(cyclic, namespace=ns)
    ref = weakref.ref(cyclic)
    del cyclic
    gc.collect()
    assert ref() is None


def test_deeper_than_the_recursion_limit_spec_raises_recursion_error():
    deep = spec_of([0])
    while deep.num_nodes <= 2 * optree_core.MAX_RECURSION_DEPTH:
        deep = deep.compose(deep)
    tree = 0
    for _ in range(deep.num_nodes - 1):
        tree = [tree]
    for walk in (deep.paths, deep.accessors, deep.__repr__, lambda: deep.is_prefix(deep),
                 lambda: deep.broadcast_to_common_suffix(deep), lambda: deep.flatten_up_to(tree)):
        with pytest.raises(RecursionError):
            walk()
    shallow = spec_of([0]).compose(spec_of([0]))
    assert deep.broadcast_to_common_suffix(shallow) == deep  # stops at the shallow leaves
    rebuilt, depth = deep.unflatten([7]), 0  # unflatten is iterative: any depth works
    while isinstance(rebuilt, list):
        rebuilt, depth = rebuilt[0], depth + 1
    assert (rebuilt, depth) == (7, deep.num_nodes - 1)


def test_namedtuple_repr_after_its_fields_changed_raises_value_error():
    cls = collections.namedtuple("Moving", "a b")
    spec = spec_of(cls(1, 2))
    cls._fields = ("a", "b", "c")
    with pytest.raises(ValueError, match="no longer match"):
        repr(spec)


def test_deque_maxlen_is_ignored_by_prefixes_but_not_by_equality():
    bounded = spec_of(collections.deque([1, 2], maxlen=2))
    wider = spec_of(collections.deque([1, 2], maxlen=5))
    unbounded = spec_of(collections.deque([1, 2]))
    for x, y in ((bounded, wider), (wider, unbounded), (unbounded, bounded)):
        assert x != y and x <= y and y <= x and not x < y
    assert bounded.broadcast_to_common_suffix(wider) == bounded  # keeps its own node
    assert not spec_of(collections.deque([1])) <= bounded  # arity still counts


def test_entry_and_child_take_int_like_indices():
    class AsIndex:
        def __index__(self):
            return 1

    class AsInt:
        def __int__(self):
            return 1

    spec = spec_of({"a": 1, "b": [2]})
    for index in (1, AsIndex(), AsInt()):
        assert spec.entry(index) == "b" and optree_core.treespec_entry(spec, index) == "b"
        assert spec.child(index) == spec_of([0]) == optree_core.treespec_child(spec, index)
    with pytest.raises(TypeError):
        spec.child("1")


def test_prefix_relations_ignore_defaultdict_factory_and_deque_maxlen():
    lhs = collections.defaultdict(list, {"a": 1, "b": [2, 3]})
    rhs = collections.defaultdict(set, {"b": [5, [6]], "a": 4})
    assert spec_of(lhs).is_prefix(spec_of(rhs)) and optree_core.prefix_errors(lhs, rhs) == []
    lhs, rhs = collections.deque([1, 2]), collections.deque([3, [4, 5]], maxlen=3)
    assert spec_of(lhs).is_prefix(spec_of(rhs)) and optree_core.prefix_errors(lhs, rhs) == []


def test_structseq_repr_names_unnamed_slots_by_index():
    import os

    stat = os.stat_result(range(os.stat_result.n_fields))
    text = repr(spec_of(stat))
    assert text.startswith("PyTreeSpec(os.stat_result(st_mode=*, st_ino=*,")
    assert text.endswith("st_size=*, <unnamed@7>=*, <unnamed@8>=*, <unnamed@9>=*))")


def test_transform_merges_namespaces_and_checks_what_callbacks_return():
    from optree_core.registry import GLOBAL_NAMESPACE

    ns = "ns-transform"
    with duo_registered((GLOBAL_NAMESPACE, False), (ns, True)):
        spec = spec_of([Duo(0, 0), 1])
        scoped_leaf = spec_of(Duo(0, 0), namespace=ns)
        with pytest.raises(ValueError, match="differently"):
            spec.transform(f_leaf=lambda leaf: scoped_leaf)
    with pytest.raises(TypeError, match="must return a PyTreeSpec"):
        spec_of([1]).transform(f_node=lambda node: None)
    with pytest.raises(TypeError, match="must return a PyTreeSpec"):
        spec_of([1]).transform(f_leaf=lambda leaf: 0)
    ns2 = "ns-transform-2"
    with optree_core.dict_insertion_ordered(True, namespace=ns2):
        ordered = spec_of({"b": 1, "a": 2}, namespace=ns2)
        built = optree_core.treespec_dict({"b": LEAF, "a": LEAF}, namespace=ns2)
    assert ordered.namespace == built.namespace == ns2  # dict order depends on the namespace
    assert ordered == built and ordered.entries() == ["b", "a"]
    assert spec_of([1]).transform(f_leaf=lambda leaf: ordered).namespace == ns2


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
        with pytest.warns(UserWarning, match="leaf"):
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


def test_malformed_node_states_are_refused():
    kind = optree_core.PyTreeKind
    leaf = (int(kind.LEAF), 0, None, None, None, 1, 1, None)

    def load(*nodes, none_is_leaf=False):
        spec = optree_core.PyTreeSpec.__new__(optree_core.PyTreeSpec)
        spec.__setstate__((nodes, none_is_leaf, ""))
        return spec

    ab = {"a": None, "b": None}
    for nodes, words in [
        ((leaf, leaf, (int(kind.DICT), 2, ["a", "b"], None, None, 2, 3, None)), "original keys"),
        (((int(kind.LEAF), 0, "x", None, None, 1, 1, None),), "node data"),
        ((leaf, leaf, (int(kind.TUPLE), 2, "x", None, None, 2, 3, None)), "node data"),
        ((leaf, leaf, (int(kind.TUPLE), 2, None, None, tuple, 2, 3, None)), "custom type"),
        ((leaf, leaf, (int(kind.DICT), 2, ["a", "a"], None, None, 2, 3, ab)), "duplicate"),
        ((leaf, leaf, (int(kind.DEFAULTDICT), 2, (3, ["a", "b"]), None, None, 2, 3, ab)),
         "factory"),
        (((int(kind.DEQUE), 0, "x", None, None, 0, 1, None),), "maxlen"),
        ((leaf, leaf, (int(kind.DEQUE), 2, 1, None, None, 2, 3, None)), "maxlen"),
    ]:
        with pytest.raises(RuntimeError, match=words):
            load(*nodes)
    with pytest.raises(RuntimeError, match="None is a leaf"):
        load((int(kind.NONE), 0, None, None, None, 0, 1, None), none_is_leaf=True)
    # A defaultdict's (factory, keys) written as a list is read as the pair it stands for.
    spec = load(leaf, leaf, (int(kind.DEFAULTDICT), 2, [list, ["a", "b"]], None, None, 2, 3, ab))
    assert spec.unflatten([1, 2]) == collections.defaultdict(list, a=1, b=2)
    assert spec == spec_of(collections.defaultdict(list, a=0, b=0))


def test_a_frozendict_state_is_a_value_error_where_python_has_no_frozendict():
    state = spec_of({"a": 1, "b": 2}).__getstate__()
    frozen = ((*state[0][:-1], (int(optree_core.PyTreeKind.FROZENDICT), *state[0][-1][1:])),
              *state[1:])
    spec = optree_core.PyTreeSpec.__new__(optree_core.PyTreeSpec)
    with pytest.raises(ValueError, match="frozendict"):
        spec.__setstate__(frozen)


def test_custom_nodes_from_different_namespaces_registrations_differ():
    cls = type("Pair", (), {"__init__": lambda self, a, b: setattr(self, "ab", (a, b))})
    ns = fresh_namespace()
    optree_core.register_pytree_node(cls, lambda p: (p.ab, None), lambda m, c: cls(*c),
                                     namespace=optree_core.registry.GLOBAL_NAMESPACE)
    optree_core.register_pytree_node(cls, lambda p: (p.ab[::-1], None),
                                     lambda m, c: cls(*c[::-1]), namespace=ns)
    try:
        global_spec = spec_of(cls(1, 2))
        seen_elsewhere = spec_of(cls(1, 2), namespace=fresh_namespace())
        own_spec = spec_of(cls(1, 2), namespace=ns)
        # The global registration flattened both of the first two: equal, whatever the namespace.
        assert global_spec == seen_elsewhere and hash(global_spec) == hash(seen_elsewhere)
        assert own_spec != global_spec and own_spec != seen_elsewhere
        assert repr(own_spec) == f"PyTreeSpec(CustomTreeNode(Pair[None], [*, *]), namespace={ns!r})"
    finally:
        optree_core.unregister_pytree_node(cls, namespace=optree_core.registry.GLOBAL_NAMESPACE)
        optree_core.unregister_pytree_node(cls, namespace=ns)


def test_repr_names_a_class_made_in_a_function_by_its_name():
    def make():
        class Local(collections.namedtuple("Local", "x")):
            pass

        class Node:
            pass

        return Local, Node

    local, node = make()
    ns = fresh_namespace()
    optree_core.register_pytree_node(node, lambda n: ((), 7), lambda m, c: node(), namespace=ns)
    try:
        assert "<locals>" in node.__qualname__
        assert repr(spec_of([local(1), node()], namespace=ns)) == (
            f"PyTreeSpec([Local(x=*), CustomTreeNode(Node[7], [])], namespace={ns!r})")
    finally:
        optree_core.unregister_pytree_node(node, namespace=ns)
