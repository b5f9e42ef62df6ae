"""Flattening a tree right after another of (almost) the same structure.

optree_core may reuse the treespec of a recently flattened tree once it has verified that the new
tree has the same structure. These tests prime that reuse with one tree, then flatten a variant
that differs in exactly one structural detail (dict insertion order, a key, a defaultdict's
factory, a deque's maxlen, the namedtuple class, None versus a leaf, list versus tuple, 1 versus
True as a key, ...) and check the variant against the pure-Python reference.
"""

from __future__ import annotations

import collections
import gc
import random
import threading
from typing import Any

import reference
from helpers import Point
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import pytrees

import optree_core

OtherPoint = collections.namedtuple("OtherPoint", ["x", "y"])  # same fields, another class
OTHER_FACTORY = {list: int, int: dict, dict: list, None: list}


def _variants_of_node(obj: Any) -> list[Any]:
    """Copies of obj that differ from it in one structural detail at this node."""
    out: list[Any] = []
    cls = type(obj)
    if obj is None:
        out.append(0)
    elif cls is dict:
        items = list(obj.items())
        if len(items) > 1:
            out.append(dict(reversed(items)))
        if items:
            (k, v), rest = items[0], items[1:]
            out.append(
                dict([(f"{k}_", v), *rest]) if isinstance(k, str) else dict([(k + 1000, v), *rest])
            )
            if k == 1 and type(k) is int:
                out.append(dict([(True, v), *rest]))
        out.append({**obj, "zz_new": 0} if all(isinstance(k, str) for k in obj) else obj | {999: 0})
        out.append(collections.OrderedDict(items))
    elif cls is collections.OrderedDict:
        items = list(obj.items())
        if len(items) > 1:
            out.append(collections.OrderedDict(reversed(items)))
        out.append(dict(items))
    elif cls is collections.defaultdict:
        out.append(collections.defaultdict(OTHER_FACTORY.get(obj.default_factory, list), obj))
        if len(obj) > 1:
            out.append(collections.defaultdict(obj.default_factory, reversed(list(obj.items()))))
    elif cls is collections.deque:
        out.append(collections.deque(obj, maxlen=None if obj.maxlen is not None else len(obj) + 1))
        out.append(list(obj))
    elif cls is Point:
        out.append(OtherPoint(*obj))
        out.append(tuple(obj))
    elif cls is list:
        out.append(tuple(obj))
        out.append([*obj, 0])
        if obj:
            out.append(obj[:-1])
    elif cls is tuple:
        out.append(list(obj))
    elif not isinstance(obj, (list, tuple, dict, collections.deque)):
        out.append(None)
        out.append([obj])
    return out


def _rebuild_with(obj: Any, path: list[int], replacement: Any) -> Any:
    """obj with its path[0]-th child (recursively) replaced; containers are copied."""
    if not path:
        return replacement
    i, rest = path[0], path[1:]
    cls = type(obj)
    if cls in (dict, collections.OrderedDict):
        items = list(obj.items())
        k, v = items[i]
        items[i] = (k, _rebuild_with(v, rest, replacement))
        return cls(items)
    if cls is collections.defaultdict:
        items = list(obj.items())
        k, v = items[i]
        items[i] = (k, _rebuild_with(v, rest, replacement))
        return collections.defaultdict(obj.default_factory, items)
    children = list(obj)
    children[i] = _rebuild_with(children[i], rest, replacement)
    if cls is collections.deque:
        return collections.deque(children, maxlen=obj.maxlen)
    if cls is list:
        return children
    if cls is tuple:
        return tuple(children)
    if reference.is_namedtuple_instance(obj):
        return cls(*children)
    return cls(children)  # PyStructSequence


def _container_paths(obj: Any, prefix: list[int] | None = None) -> list[list[int]]:
    prefix = prefix or []
    paths = [prefix]
    if isinstance(obj, dict):
        children = list(obj.values())
    elif isinstance(obj, (list, tuple, collections.deque)):
        children = list(obj)
    else:
        return paths
    for i, child in enumerate(children):
        paths += _container_paths(child, [*prefix, i])
    return paths


def _check_against_reference(tree: Any, none_is_leaf: bool) -> None:
    ref_paths, ref_leaves, ref_spec = reference.flatten_with_path(tree, none_is_leaf=none_is_leaf)
    paths, leaves, spec = optree_core.tree_flatten_with_path(tree, none_is_leaf=none_is_leaf)
    assert leaves == ref_leaves
    assert paths == ref_paths
    assert repr(spec) == reference.spec_repr(ref_spec, none_is_leaf=none_is_leaf)
    assert spec.num_nodes == reference.num_nodes(ref_spec)
    assert reference.same_tree(spec.unflatten(leaves), tree)
    leaves2, spec2 = optree_core.tree_flatten(tree, none_is_leaf=none_is_leaf)
    assert leaves2 == ref_leaves
    assert spec2 == spec
    mapped = optree_core.tree_map(lambda x: ("m", x), tree, none_is_leaf=none_is_leaf)
    assert reference.same_tree(
        mapped, reference.unflatten(ref_spec, [("m", x) for x in ref_leaves])
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=pytrees(max_leaves=20), none_is_leaf=st.booleans(), seed=st.integers(0, 2**16))
def test_one_detail_away_from_a_primed_structure(tree, none_is_leaf, seed):
    rng = random.Random(seed)
    paths = _container_paths(tree)
    for path in rng.sample(paths, min(4, len(paths))):
        node = tree
        for i in path:
            node = list(node.values())[i] if isinstance(node, dict) else list(node)[i]
        for variant_node in _variants_of_node(node):
            variant = _rebuild_with(tree, path, variant_node)
            optree_core.tree_flatten(tree, none_is_leaf=none_is_leaf)  # prime any reuse
            optree_core.tree_map(lambda x: x, tree, none_is_leaf=none_is_leaf)
            _check_against_reference(variant, none_is_leaf)


def test_literal_variants_after_priming():
    cases = [
        ({"b": 1, "a": 2}, {"a": 2, "b": 1}),
        ({1: "x"}, {True: "x"}),
        ({"k": 1}, {"k": None}),
        ([1, 2], (1, 2)),
        (Point(1, 2), OtherPoint(1, 2)),
        (collections.defaultdict(list, a=1), collections.defaultdict(int, a=1)),
        (collections.deque([1], maxlen=3), collections.deque([1], maxlen=4)),
        (collections.deque([1], maxlen=3), collections.deque([1])),
        (collections.OrderedDict(a=1, b=2), collections.OrderedDict(b=2, a=1)),
        ({"a": [1, {"b": 2}]}, {"a": [1, {"b": (2,)}]}),
    ]
    for primer, variant in cases:
        for none_is_leaf in (False, True):
            optree_core.tree_flatten(primer, none_is_leaf=none_is_leaf)
            _check_against_reference(variant, none_is_leaf)
            _check_against_reference(primer, none_is_leaf)


def test_equal_str_keys_from_different_objects_and_mutation_between_calls():
    key = "".join(["ab", "c"])  # equal to "abc", a different object
    tree = {"abc": [1, 2]}
    optree_core.tree_flatten(tree)
    _check_against_reference({key: [3, 4]}, False)
    tree["abc"].append(5)  # mutate in place: the next flatten must see it
    assert optree_core.tree_leaves(tree) == [1, 2, 5]
    tree["abc"][0] = None
    assert optree_core.tree_leaves(tree) == [2, 5]
    assert optree_core.tree_leaves(tree, none_is_leaf=True) == [None, 2, 5]
    del tree["abc"]
    assert optree_core.tree_leaves(tree) == []


def test_wide_tree_differing_only_in_its_first_child():
    # The reused spec is checked last child first: a difference in the first child shows last,
    # after every other leaf was collected.
    primer = [{"a": i, "b": (i, i)} for i in range(3000)]
    leaves, spec = optree_core.tree_flatten(primer)
    assert leaves == [x for i in range(3000) for x in (i, i, i)]
    for first in ({"a": 0, "b": [0, 0]}, {"a": 0}, None, 7, {"b": (0, 0), "a": 0}):
        _check_against_reference([first, *primer[1:]], False)
    optree_core.tree_flatten(primer)  # primes again (the variants took the cache's slot)
    again, same_spec = optree_core.tree_flatten(primer)
    assert again == leaves and again is not leaves
    assert same_spec == spec


def test_reused_spec_gives_a_fresh_complete_leaves_list():
    tree = {"x": [1, 2, (3, None)], "y": 4}
    first, _ = optree_core.tree_flatten(tree)
    second, _ = optree_core.tree_flatten(tree)
    assert first == second == [1, 2, 3, 4]
    assert gc.is_tracked(second)
    second.append(5)
    assert optree_core.tree_leaves(tree) == [1, 2, 3, 4]


class _ScanningMeta(type):
    """A metaclass whose attribute misses run Python code: it reads every list the collector
    knows of, as a finalizer or a debugger might."""

    scans = 0

    def __getattr__(cls, name):
        _ScanningMeta.scans += 1
        for obj in gc.get_objects():
            if type(obj) is list and len(obj) == 2000:
                list(obj)  # reads each item: an unfilled slot would crash here
        raise AttributeError(name)


def test_python_code_run_while_checking_a_reused_spec_sees_no_unfilled_leaves_list():
    primer = [0, *range(1, 2000)]
    optree_core.tree_flatten(primer)

    class FreshTupleLeaf(tuple, metaclass=_ScanningMeta):
        pass  # classified (namedtuple? struct sequence?) on first sight, reading _fields

    variant = [FreshTupleLeaf(), *range(1, 2000)]
    scans = _ScanningMeta.scans
    leaves, spec = optree_core.tree_flatten(variant)
    assert _ScanningMeta.scans > scans  # the check ran Python code mid-match
    assert leaves == variant and spec.num_leaves == 2000


def test_registration_between_calls_is_seen():
    class Late:
        def __init__(self, v):
            self.v = v

    ns = "optree-core-tests.structure-reuse"
    tree = {"a": Late(1), "b": 2}
    assert optree_core.tree_leaves(tree, namespace=ns) == [tree["a"], 2]
    optree_core.register_pytree_node(
        Late, lambda x: ((x.v,), None), lambda m, c: Late(*c), namespace=ns
    )
    try:
        assert optree_core.tree_leaves(tree, namespace=ns) == [1, 2]
    finally:
        optree_core.unregister_pytree_node(Late, namespace=ns)
    assert optree_core.tree_leaves(tree, namespace=ns) == [tree["a"], 2]


def test_dict_insertion_ordered_between_calls_is_seen():
    ns = "optree-core-tests.structure-reuse-dio"
    tree = {"b": 1, "a": 2}
    assert optree_core.tree_leaves(tree, namespace=ns) == [2, 1]
    with optree_core.dict_insertion_ordered(True, namespace=ns):
        assert optree_core.tree_leaves(tree, namespace=ns) == [1, 2]
        assert optree_core.tree_structure(tree, namespace=ns).entries() == ["b", "a"]
    assert optree_core.tree_leaves(tree, namespace=ns) == [2, 1]
    assert optree_core.tree_structure(tree, namespace=ns).entries() == ["a", "b"]


def test_variants_helper_really_changes_structure():
    # Guards the test's own generator: every variant must differ in structure or node type
    # (with none_is_leaf=False; with True, a leaf turned into None is no change, by design).
    none_is_leaf = False
    tree = {
        "d": collections.defaultdict(list, a=1),
        "p": Point(1, [2]),
        "q": collections.deque([1], maxlen=2),
    }
    for path in _container_paths(tree):
        node = tree
        for i in path:
            node = list(node.values())[i] if isinstance(node, dict) else list(node)[i]
        for v in _variants_of_node(node):
            variant = _rebuild_with(tree, path, v)
            ref_a = reference.flatten(tree, none_is_leaf=none_is_leaf)[1]
            ref_b = reference.flatten(variant, none_is_leaf=none_is_leaf)[1]
            assert ref_a != ref_b or reference.spec_repr(ref_a) != reference.spec_repr(ref_b), (
                path,
                v,
            )


def test_threads_flattening_colliding_structures_get_their_own():
    # Same root type and size (so any reuse slot is shared), different structures per thread.
    def tree_for(i):
        inner = [collections.deque([i], maxlen=i + 1), Point(i, None), {"k": (i,) * (i % 3)}]
        return {"a": inner[i % 3], "b": [i] * (i % 4), "c": collections.OrderedDict(z=i)}

    trees = [tree_for(i) for i in range(8)]
    expected = [reference.flatten_with_path(t) for t in trees]
    errors: list[BaseException] = []
    start = threading.Barrier(len(trees))

    def worker(i):
        try:
            start.wait()
            ref_paths, ref_leaves, ref_spec = expected[i]
            for _ in range(300):
                paths, leaves, spec = optree_core.tree_flatten_with_path(trees[i])
                assert leaves == ref_leaves
                assert paths == ref_paths
                assert repr(spec) == reference.spec_repr(ref_spec)
                assert reference.same_tree(spec.unflatten(leaves), trees[i])
        except BaseException as exc:  # re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(trees))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[0]
