"""optree_core.pytree and optree_core.treespec: the short names, and reexport()'s namespaced copy."""

from __future__ import annotations

import sys
from collections import UserList

import pytest
from helpers import fresh_namespace

import optree_core
import optree_core.pytree as pytree
import optree_core.treespec as treespec


def test_short_names_are_the_same_functions_in_the_same_order():
    tree_ops = [n[len("tree_"):] for n in optree_core.__all__ if n.startswith("tree_")]
    assert pytree.__all__ == ["reexport", "PyTreeSpec", "PyTreeKind", "PyTreeEntry", *tree_ops,
                              "register_node", "register_node_class", "unregister_node",
                              "dict_insertion_ordered"]
    for name in tree_ops:
        assert getattr(pytree, name) is getattr(optree_core, f"tree_{name}")
    assert pytree.register_node is optree_core.register_pytree_node
    spec_ops = [n[len("treespec_"):] for n in optree_core.__all__ if n.startswith("treespec_")]
    assert treespec.__all__ == [n for n in spec_ops if n in set(treespec.__all__)]
    for name in treespec.__all__:
        assert getattr(treespec, name) is getattr(optree_core, f"treespec_{name}")
    assert pytree.map(lambda x: x + 1, [1, (2,)]) == [2, (3,)]


def test_reexport_defaults_every_namespaced_function():
    ns = fresh_namespace()
    name = f"reexport_test_{ns.replace('-', '_')}.pytree"
    mod = pytree.reexport(namespace=ns, module=name)
    try:
        assert sys.modules[name] is mod and sys.modules[f"{name}.dataclasses"] is mod.dataclasses
        assert "reexport" not in mod.__all__ and "reexport" not in dir(mod)
        assert {"dataclasses", "functools", "__version__"} <= set(dir(mod))

        class Rev(UserList):
            pass

        mod.register_node(Rev, lambda x: (list(reversed(x)), None),
                          lambda _, c: Rev(reversed(c)))
        assert mod.leaves(Rev([1, 2])) == [2, 1]
        assert optree_core.tree_leaves(Rev([1, 2])) == [Rev([1, 2])]
        assert mod.leaves(Rev([1, 2]), namespace="") == [Rev([1, 2])]
        assert mod.register_node.get(Rev).namespace == ns

        @mod.dataclasses.dataclass
        class Pair:
            a: int
            b: int

        assert mod.functools.reduce(lambda x, y: x + y, Pair(1, 2)) == 3
        assert mod.functools.partial is optree_core.functools.partial
        with pytest.raises(AttributeError, match="no attribute"):
            mod.not_there  # noqa: B018
        with pytest.raises(ValueError, match="already exists"):
            pytree.reexport(namespace=ns, module=name)
    finally:
        for key in (name, f"{name}.dataclasses", f"{name}.functools"):
            sys.modules.pop(key, None)


def test_reexport_argument_errors():
    with pytest.raises(TypeError, match="must be a string"):
        pytree.reexport(namespace=3)
    for bad in ("", "1abc", "a.2b", "a-b", " a"):
        with pytest.raises(ValueError, match="invalid module name"):
            pytree.reexport(namespace="x", module=bad)


def test_str_keys_sort_in_code_point_order_whatever_their_bytes():
    # One-byte str keys sort by their bytes in C++; the order must still be Python's.
    keys = ["b", "a", "", "a\x00", "aa", "\xe9t\xe9", "\xff", "Z", "prefix_0001_long_tail_b",
            "prefix_0001_long_tail_a", "prefix_0001", "prefix_00010", "12345678", "1234567"]
    many = [f"k{i}_{j}" for i in (3, 12, 7) for j in range(20)]
    for mixed in (keys, many, [*keys, "\u0101"]):  # the last one has a two-byte key
        tree = dict.fromkeys(mixed, 0) | {key: i for i, key in enumerate(mixed)}
        leaves, spec = optree_core.tree_flatten(tree)
        assert leaves == [tree[key] for key in sorted(mixed)]
        assert spec.unflatten(leaves) == tree and list(spec.unflatten(leaves)) == list(tree)
