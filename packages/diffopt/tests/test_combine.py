"""chain and identity."""

import pytest
import torch

import diffopt


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
    tx = diffopt.chain(diffopt.scale(1.0))
    with pytest.raises(ValueError, match="state with 1"):
        tx.update([torch.ones(1)], ())
