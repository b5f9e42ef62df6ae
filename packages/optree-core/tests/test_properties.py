"""Property-based tests: optree_core against the pure-Python reference in reference.py."""

from __future__ import annotations

import collections
import pickle

import pytest
import reference
from helpers import REFERENCE_NAMESPACE, Pair
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import pytrees

import optree_core

# Moderate example counts: the whole suite must stay well under two minutes on 2 cores.
PROPERTY_SETTINGS = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

none_is_leaf_flags = st.booleans()


def _ref_is_leaf_list_of_one(x):
    return type(x) is list and len(x) == 1


@PROPERTY_SETTINGS
@given(tree=pytrees(), none_is_leaf=none_is_leaf_flags)
def test_flatten_matches_reference(tree, none_is_leaf):
    _ref_paths, ref_leaves, ref_spec = reference.flatten_with_path(tree, none_is_leaf=none_is_leaf)
    leaves, spec = optree_core.tree_flatten(tree, none_is_leaf=none_is_leaf)
    assert leaves == ref_leaves
    assert all(a is b for a, b in zip(leaves, ref_leaves)), "leaves must be the same objects"
    assert spec.num_leaves == reference.num_leaves(ref_spec) == len(leaves)
    assert spec.num_nodes == reference.num_nodes(ref_spec)
    assert spec.num_children == len(ref_spec.children)
    assert spec.none_is_leaf is none_is_leaf
    assert repr(spec) == reference.spec_repr(ref_spec, none_is_leaf=none_is_leaf)
    assert optree_core.tree_leaves(tree, none_is_leaf=none_is_leaf) == ref_leaves
    assert list(optree_core.tree_iter(tree, none_is_leaf=none_is_leaf)) == ref_leaves
    assert optree_core.tree_structure(tree, none_is_leaf=none_is_leaf) == spec


@PROPERTY_SETTINGS
@given(tree=pytrees(), none_is_leaf=none_is_leaf_flags)
def test_paths_match_reference(tree, none_is_leaf):
    ref_paths, ref_leaves, ref_spec = reference.flatten_with_path(tree, none_is_leaf=none_is_leaf)
    paths, leaves, spec = optree_core.tree_flatten_with_path(tree, none_is_leaf=none_is_leaf)
    assert paths == ref_paths
    assert leaves == ref_leaves
    assert spec.paths() == ref_paths
    assert optree_core.tree_paths(tree, none_is_leaf=none_is_leaf) == ref_paths
    assert spec.entries() == list(ref_spec.entries)
    # Every accessor reaches the leaf its path names.
    for accessor, path, leaf in zip(spec.accessors(), ref_paths, ref_leaves):
        assert accessor.path == path
        assert accessor(tree) is leaf


@PROPERTY_SETTINGS
@given(tree=pytrees(), none_is_leaf=none_is_leaf_flags)
def test_unflatten_round_trip(tree, none_is_leaf):
    leaves, spec = optree_core.tree_flatten(tree, none_is_leaf=none_is_leaf)
    rebuilt = optree_core.tree_unflatten(spec, leaves)
    assert reference.same_tree(rebuilt, tree)
    assert reference.same_tree(spec.unflatten(leaves), tree)
    # New leaves land where the reference puts them.
    _, ref_spec = reference.flatten(tree, none_is_leaf=none_is_leaf)
    fresh = [("leaf", i) for i in range(len(leaves))]
    assert reference.same_tree(spec.unflatten(fresh), reference.unflatten(ref_spec, fresh))
    # Flattening the rebuilt tree gives the same spec, and the spec survives pickling.
    assert optree_core.tree_structure(rebuilt, none_is_leaf=none_is_leaf) == spec
    clone = pickle.loads(pickle.dumps(spec))
    assert clone == spec
    assert hash(clone) == hash(spec)
    assert repr(clone) == repr(spec)


@PROPERTY_SETTINGS
@given(tree=pytrees(), none_is_leaf=none_is_leaf_flags)
def test_tree_map_matches_reference(tree, none_is_leaf):
    _, ref_leaves, ref_spec = reference.flatten_with_path(tree, none_is_leaf=none_is_leaf)
    mapped = optree_core.tree_map(lambda x: ("mapped", x), tree, none_is_leaf=none_is_leaf)
    expected = reference.unflatten(ref_spec, [("mapped", x) for x in ref_leaves])
    assert reference.same_tree(mapped, expected)
    with_path = optree_core.tree_map_with_path(lambda p, x: (p, x), tree, none_is_leaf=none_is_leaf)
    ref_paths, _, _ = reference.flatten_with_path(tree, none_is_leaf=none_is_leaf)
    assert reference.same_tree(
        with_path, reference.unflatten(ref_spec, list(zip(ref_paths, ref_leaves)))
    )
    # Two trees of the same structure zip leaf by leaf.
    twice = optree_core.tree_map(lambda a, b: (a, b), tree, mapped, none_is_leaf=none_is_leaf)
    assert reference.same_tree(
        twice, reference.unflatten(ref_spec, [(x, ("mapped", x)) for x in ref_leaves])
    )


@PROPERTY_SETTINGS
@given(tree=pytrees(with_custom=True), none_is_leaf=none_is_leaf_flags)
def test_custom_nodes_match_reference(tree, none_is_leaf):
    ref_paths, ref_leaves, ref_spec = reference.flatten_with_path(tree, none_is_leaf=none_is_leaf)
    paths, leaves, spec = optree_core.tree_flatten_with_path(
        tree, none_is_leaf=none_is_leaf, namespace=REFERENCE_NAMESPACE
    )
    assert paths == ref_paths
    assert leaves == ref_leaves
    assert spec.num_nodes == reference.num_nodes(ref_spec)
    assert reference.same_tree(spec.unflatten(leaves), tree)
    if isinstance(tree, Pair):
        assert spec.kind == optree_core.PyTreeKind.CUSTOM
        assert spec.type is Pair
        assert spec.entries() == ["left", "right"]
    # Outside the namespace a Pair is a leaf.
    outside = optree_core.tree_leaves(tree, none_is_leaf=none_is_leaf)
    ref_outside = reference.flatten(
        tree, is_leaf=lambda x: isinstance(x, Pair), none_is_leaf=none_is_leaf
    )[0]
    assert outside == ref_outside


@PROPERTY_SETTINGS
@given(tree=pytrees())
def test_is_leaf_matches_reference(tree):
    ref_paths, ref_leaves, ref_spec = reference.flatten_with_path(
        tree, is_leaf=_ref_is_leaf_list_of_one
    )
    paths, leaves, spec = optree_core.tree_flatten_with_path(tree, is_leaf=_ref_is_leaf_list_of_one)
    assert paths == ref_paths
    assert leaves == ref_leaves
    assert spec.num_nodes == reference.num_nodes(ref_spec)
    assert reference.same_tree(spec.unflatten(leaves), tree)


@PROPERTY_SETTINGS
@given(tree=pytrees(), none_is_leaf=none_is_leaf_flags)
def test_one_level_and_children_match_reference(tree, none_is_leaf):
    _, ref_spec = reference.flatten(tree, none_is_leaf=none_is_leaf)
    spec = optree_core.tree_structure(tree, none_is_leaf=none_is_leaf)
    children = spec.children()
    assert len(children) == len(ref_spec.children) == spec.num_children
    for i, (child, ref_child) in enumerate(zip(children, ref_spec.children)):
        assert child == spec.child(i)
        assert child.num_leaves == reference.num_leaves(ref_child)
        assert child.num_nodes == reference.num_nodes(ref_child)
    assert spec.is_leaf() == (ref_spec.kind == reference.LEAF)
    assert optree_core.treespec_is_prefix(spec, spec)
    assert optree_core.treespec_is_suffix(spec, spec)
    assert not spec.is_prefix(spec, strict=True)


@PROPERTY_SETTINGS
@given(tree=pytrees(max_leaves=12), none_is_leaf=none_is_leaf_flags)
def test_compose_with_pair_of_leaves(tree, none_is_leaf):
    spec = optree_core.tree_structure(tree, none_is_leaf=none_is_leaf)
    inner = optree_core.tree_structure((0, 0), none_is_leaf=none_is_leaf)
    composed = spec.compose(inner)
    assert composed.num_leaves == 2 * spec.num_leaves
    assert composed.num_nodes == spec.num_nodes + 2 * spec.num_leaves
    doubled = optree_core.tree_map(lambda x: (x, x), tree, none_is_leaf=none_is_leaf)
    assert optree_core.tree_structure(doubled, none_is_leaf=none_is_leaf) == composed


@PROPERTY_SETTINGS
@given(
    tree=pytrees(max_leaves=15),
    delta=st.integers(-3, 3).filter(lambda d: d != 0),
)
def test_unflatten_wrong_leaf_count_raises(tree, delta):
    leaves, spec = optree_core.tree_flatten(tree)
    wrong = list(range(max(0, len(leaves) + delta)))
    if len(wrong) == len(leaves):
        return
    with pytest.raises(ValueError, match=str(len(leaves))):
        optree_core.tree_unflatten(spec, wrong)


@PROPERTY_SETTINGS
@given(tree=pytrees(), none_is_leaf=none_is_leaf_flags)
def test_dict_insertion_ordered_matches_reference(tree, none_is_leaf):
    ns = "optree-core-tests.insertion-ordered"
    ref_paths, ref_leaves, _ = reference.flatten_with_path(
        tree, none_is_leaf=none_is_leaf, dict_insertion_ordered=True
    )
    with optree_core.dict_insertion_ordered(True, namespace=ns):
        paths, leaves, spec = optree_core.tree_flatten_with_path(
            tree, none_is_leaf=none_is_leaf, namespace=ns
        )
        assert reference.same_tree(spec.unflatten(leaves), tree)
    assert paths == ref_paths
    assert leaves == ref_leaves


def test_reference_agrees_on_a_hand_written_tree():
    # Guards the oracle itself: the reference must give these literal answers.
    tree = {"b": (1, None), "a": collections.OrderedDict([("y", 2), ("x", [3])])}
    paths, leaves, spec = reference.flatten_with_path(tree)
    assert leaves == [2, 3, 1]
    assert paths == [("a", "y"), ("a", "x", 0), ("b", 0)]
    assert reference.num_nodes(spec) == 8
    assert reference.spec_repr(spec) == (
        "PyTreeSpec({'a': OrderedDict({'y': *, 'x': [*]}), 'b': (*, None)})"
    )
    assert reference.same_tree(reference.unflatten(spec, leaves), tree)
