"""chain and identity."""

import copy
import pickle

import pytest
import torch

import diffopt
from diffopt.base import ChainedGradientTransformation


def test_chain_order_and_state():
    tx = diffopt.chain(diffopt.trace(momentum=0.5), diffopt.scale(-2.0))
    params = [torch.zeros(1)]
    state = tx.init(params)
    assert len(state) == 2
    u1, state = tx.update([torch.ones(1)], state)
    u2, state = tx.update([torch.ones(1)], state)
    assert u1[0].item() == -2.0 and u2[0].item() == -3.0


def test_method_chain_and_flat():
    tx = diffopt.scale(2.0).chain(diffopt.scale(3.0))
    assert tx.update([torch.ones(1)], tx.init(None))[0][0].item() == 6.0
    assert diffopt.chain.flat is not None


def test_chain_rejects_non_transformations():
    with pytest.raises(TypeError, match="argument 1"):
        diffopt.chain(diffopt.scale(1.0), lambda g: g)
    tx = diffopt.chain(diffopt.scale(1.0), diffopt.scale(2.0))
    with pytest.raises(ValueError, match="state with 2"):
        tx.update([torch.ones(1)], ())


# TorchOpt's chain: no argument is the identity, one is that transformation, more are one
# ChainedGradientTransformation with nested chains spliced in and identities dropped.
def test_chain_of_none_and_of_one():
    empty = diffopt.chain()
    assert empty.init([torch.zeros(1)]) == diffopt.EmptyState()
    single = diffopt.scale(2.0)
    assert diffopt.chain(single) is single


def test_nested_chains_are_flattened_and_identities_dropped():
    a, b, c = diffopt.scale(2.0), diffopt.scale(3.0), diffopt.trace(momentum=0.5)
    nested = diffopt.chain(a, diffopt.identity(), diffopt.chain(b, c))
    flat = diffopt.chain(a, b, c)
    assert isinstance(nested, ChainedGradientTransformation)
    assert isinstance(nested, diffopt.GradientTransformation)
    assert nested.transformations == (a, b, c)
    assert nested == flat and hash(nested) == hash(flat)
    params = [torch.zeros(2)]
    state = nested.init(params)
    assert len(state) == 3 and isinstance(state[2], diffopt.transform.TraceState)
    grads = [torch.tensor([1.0, -2.0])]
    for _ in range(2):  # trace(0.5) after scaling by 6: 6g, then 6g + 0.5 * 6g
        updates, state = nested.update(grads, state)
    torch.testing.assert_close(updates[0], torch.tensor([9.0, -18.0]))


def test_method_chain_builds_a_chained_transformation():
    a, b = diffopt.scale(2.0), diffopt.scale(-1.0)
    tx = a.chain(b)
    assert isinstance(tx, ChainedGradientTransformation) and tx.transformations == (a, b)
    assert tx != diffopt.chain(b, a)
    only_identities = ChainedGradientTransformation(diffopt.identity(), diffopt.identity())
    assert only_identities.init(None) == (diffopt.EmptyState(),)


def test_alias_state_matches_torchopt_layout():
    # adam = chain(identity (no weight decay), scale_by_adam, scale(-lr)): the identity is dropped,
    # leaving TorchOpt's (ScaleByAdamState, EmptyState).
    state = diffopt.adam(lr=0.1).init({"w": torch.ones(2)})
    assert len(state) == 2 and isinstance(state[0], diffopt.transform.ScaleByAdamState)


def test_chained_transformation_copies():
    tx = diffopt.chain(diffopt.scale(2.0), diffopt.scale(3.0))
    clone = copy.copy(tx)
    assert clone == tx and isinstance(clone, ChainedGradientTransformation)
    identity = pickle.loads(pickle.dumps(diffopt.identity()))
    assert identity.update([1.0], identity.init(None)) == ([1.0], diffopt.EmptyState())
