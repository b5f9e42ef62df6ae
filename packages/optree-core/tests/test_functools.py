"""optree_core.functools: a functools.partial whose bound arguments are pytree children."""

from __future__ import annotations

import functools
import pickle

import optree_core
from optree_core.functools import partial


def three(a, b, c=1):
    return (a, b, c)


def test_partial_calls_like_functools_partial():
    p = partial(three, [1, 2], c={"k": 3})
    assert isinstance(p, functools.partial)
    assert p(5) == ([1, 2], 5, {"k": 3})
    assert p.func is three
    assert p.args == ([1, 2],)
    assert p.keywords == {"c": {"k": 3}}


def test_bound_arguments_are_children_and_func_is_metadata():
    p = partial(three, [1, 2], c={"k": 3})
    leaves, spec = optree_core.tree_flatten(p)
    assert leaves == [1, 2, 3]
    assert spec.kind == optree_core.PyTreeKind.CUSTOM
    assert optree_core.tree_paths(p) == [("args", 0, 0), ("args", 0, 1), ("keywords", "c", "k")]
    q = spec.unflatten([10, 20, 30])
    assert type(q) is partial
    assert q(0) == ([10, 20], 0, {"k": 30})
    doubled = optree_core.tree_map(lambda x: x * 2, p)
    assert doubled(0) == ([2, 4], 0, {"k": 6})
    # A different function is a different structure.
    assert spec != optree_core.tree_structure(partial(max, [1, 2], c={"k": 3}))


def test_plain_functools_partial_stays_a_leaf():
    p = functools.partial(three, 1)
    assert optree_core.tree_leaves(p) == [p]


def test_nested_partial_keeps_inner_partial_as_metadata():
    inner = partial(three, 1)
    outer = partial(inner, 2)
    assert outer() == (1, 2, 1)
    # The wrapped callable (here the inner partial) is metadata, never flattened.
    assert optree_core.tree_leaves(outer) == [2]


def test_partial_pickles():
    p = partial(max, 1)
    assert pickle.loads(pickle.dumps(p))(2) == 2


def test_reduce_is_tree_reduce():
    assert optree_core.functools.reduce(lambda a, b: a + b, {"a": 1, "b": [2, 3]}) == 6
