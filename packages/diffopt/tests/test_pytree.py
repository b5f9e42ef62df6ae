"""diffopt.pytree's own helpers: tuple flattening with optree's options, and the RPC tree helpers."""

import pytest
import torch

import optree_core
from diffopt import pytree
from diffopt.distributed import auto_init_rpc


def test_tree_flatten_as_tuple_takes_optree_options():
    tree = {"a": [torch.tensor(1.0), None], "b": (torch.tensor(2.0),)}
    leaves, spec = pytree.tree_flatten_as_tuple(tree)
    assert isinstance(leaves, tuple) and len(leaves) == 2
    leaves, spec = pytree.tree_flatten_as_tuple(tree, none_is_leaf=True)
    assert leaves[1] is None and spec == optree_core.tree_structure(tree, none_is_leaf=True)
    leaves, _ = pytree.tree_flatten_as_tuple(tree, lambda x: isinstance(x, tuple))
    assert leaves[-1] == tree["b"]


@pytest.mark.filterwarnings("ignore:You are using a Backend:UserWarning")
def test_rref_round_trip_in_a_one_worker_world():
    tree = {"w": torch.arange(3.0), "nested": [torch.ones(2), 5]}

    @auto_init_rpc()
    def run():
        rrefs = pytree.tree_as_rref(tree)
        kinds = {type(leaf).__name__ for leaf in optree_core.tree_leaves(rrefs)}
        return kinds, pytree.tree_to_here(rrefs, timeout=30.0), pytree.tree_local_value(rrefs)

    kinds, fetched, local = run()
    assert kinds == {"RRef"}
    assert optree_core.tree_structure(fetched) == optree_core.tree_structure(tree)
    for got, want in zip(optree_core.tree_leaves(fetched), optree_core.tree_leaves(tree)):
        assert torch.equal(torch.as_tensor(got), torch.as_tensor(want))
    assert local["w"] is tree["w"]  # owned here: the value itself, not a copy

