"""diffopt.transform.masked against applying the inner transformation by hand to the selected leaves."""

import pytest
import torch

import diffopt
import optree_core
from diffopt.transform import MaskedNode, MaskedState, masked


def _params():
    torch.manual_seed(0)
    return {"w": torch.randn(3, 2), "b": torch.randn(2), "head": {"w": torch.randn(2, 2),
                                                                   "b": torch.randn(2)}}


def _grads(params, seed):
    torch.manual_seed(seed)
    return optree_core.tree_map(torch.randn_like, params)


@pytest.mark.parametrize("inplace", [False, True])
def test_masked_adam_matches_adam_on_the_selected_leaves(inplace):
    params = _params()
    mask = {"w": True, "b": False, "head": {"w": True, "b": False}}
    tx = masked(diffopt.adam(lr=0.1), mask)
    # the reference: Adam on the two selected leaves alone, the others passed through
    ref = diffopt.adam(lr=0.1)
    selected = [params["w"], params["head"]["w"]]
    state, ref_state = tx.init(params), ref.init(selected)
    assert isinstance(state, MaskedState)
    for step in range(3):
        grads = _grads(params, step)
        expected_b = grads["b"].clone(), grads["head"]["b"].clone()
        expected, ref_state = ref.update([grads["w"].clone(), grads["head"]["w"].clone()],
                                         ref_state, inplace=False)
        updates, state = tx.update(grads, state, params=params, inplace=inplace)
        torch.testing.assert_close(updates["w"], expected[0])
        torch.testing.assert_close(updates["head"]["w"], expected[1])
        torch.testing.assert_close(updates["b"], expected_b[0])
        torch.testing.assert_close(updates["head"]["b"], expected_b[1])


def test_prefix_mask_covers_whole_subtrees():
    params = _params()
    tx = masked(diffopt.scale(-1.0), {"w": False, "b": False, "head": True})
    grads = _grads(params, 1)
    updates, _ = tx.update(grads, tx.init(params))
    torch.testing.assert_close(updates["head"]["w"], -grads["head"]["w"])
    torch.testing.assert_close(updates["head"]["b"], -grads["head"]["b"])
    assert updates["w"] is grads["w"] and updates["b"] is grads["b"]


def test_callable_mask_selects_matrices_for_weight_decay():
    params = _params()
    decay = masked(diffopt.transform.add_decayed_weights(0.5),
                   lambda tree: optree_core.tree_map(lambda x: x.ndim > 1, tree))
    zeros = optree_core.tree_map(torch.zeros_like, params)
    updates, _ = decay.update(zeros, decay.init(params), params=params)
    torch.testing.assert_close(updates["w"], 0.5 * params["w"])
    torch.testing.assert_close(updates["head"]["w"], 0.5 * params["head"]["w"])
    torch.testing.assert_close(updates["b"], torch.zeros(2))


def test_inner_state_only_for_selected_leaves():
    params = [torch.zeros(2), torch.zeros(3)]
    state = masked(diffopt.transform.scale_by_adam(), [False, True]).init(params)
    assert isinstance(state.inner_state.mu[0], MaskedNode)
    assert state.inner_state.mu[1].shape == (3,)
    assert len(optree_core.tree_leaves(state.inner_state.mu)) == 1


def test_none_updates_and_none_mask():
    params = [torch.ones(2), torch.ones(2)]
    tx = masked(diffopt.scale(3.0))  # no mask: every leaf
    updates, _ = tx.update([torch.ones(2), None], tx.init(params))
    assert updates[1] is None
    torch.testing.assert_close(updates[0], torch.full((2,), 3.0))


def test_masked_is_differentiable():
    p = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    q = torch.tensor([3.0], dtype=torch.float64, requires_grad=True)
    tx = masked(diffopt.scale(2.0), {"p": True, "q": False})
    updates, _ = tx.update({"p": p * p, "q": q * q}, tx.init({"p": p, "q": q}), inplace=False)
    gp, gq = torch.autograd.grad(updates["p"].sum() + updates["q"].sum(), (p, q))
    torch.testing.assert_close(gp, 4 * p.detach())
    torch.testing.assert_close(gq, 2 * q.detach())


def test_bad_masks_are_rejected():
    params = {"a": torch.ones(2), "b": torch.ones(2)}
    with pytest.raises(ValueError, match="structure"):
        masked(diffopt.scale(1.0), {"a": True}).init(params)
    with pytest.raises(TypeError, match="booleans"):
        masked(diffopt.scale(1.0), {"a": torch.ones(2, dtype=torch.bool), "b": True}).init(params)
    with pytest.raises(TypeError, match="GradientTransformation"):
        masked(lambda g: g, {"a": True, "b": True})
    tx = masked(diffopt.scale(1.0), {"a": True, "b": False})
    with pytest.raises(TypeError, match="MaskedState"):
        tx.update(params, (), params=params)
