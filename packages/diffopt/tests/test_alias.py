"""One battery over every functional optimizer: a new alias is covered by adding one line.

For each alias: init builds a state matching the params, update returns finite updates shaped
like the params (for dict, tuple and nested pytrees), it decreases a convex quadratic, it is
differentiable end to end with ``inplace=False``, ``None`` gradients leave their leaf alone, and a
wrong dtype or structure raises a clear error.
"""

import pytest
import torch

import diffopt

ALIASES = {
    "sgd": lambda: diffopt.sgd(lr=0.1),
    "sgd-momentum": lambda: diffopt.sgd(lr=0.1, momentum=0.9, nesterov=True),
    "adam": lambda: diffopt.adam(lr=0.1),
    "adam-maximize": lambda: diffopt.adam(lr=0.1, maximize=True),
    "adamw": lambda: diffopt.adamw(lr=0.1),
    "rmsprop": lambda: diffopt.rmsprop(lr=0.05),
    "rmsprop-centered": lambda: diffopt.rmsprop(lr=0.05, centered=True, momentum=0.5),
    "adagrad": lambda: diffopt.adagrad(lr=0.3),
    "adadelta": lambda: diffopt.adadelta(lr=1.0, eps=1e-2),
    "adamax": lambda: diffopt.adamax(lr=0.1),
    "radam": lambda: diffopt.radam(lr=0.1),
    "lion": lambda: diffopt.lion(lr=0.05, weight_decay=0.1),
    "lion-accelerated-maximize": lambda: diffopt.lion(lr=0.05, maximize=True, use_accelerated_op=True),
    "adan": lambda: diffopt.adan(lr=0.1, weight_decay=0.02),
    "adan-accelerated": lambda: diffopt.adan(lr=0.1, weight_decay=0.02, no_prox=True, use_accelerated_op=True),
    "nadam": lambda: diffopt.nadam(lr=0.1),
    "nadamw-maximize": lambda: diffopt.nadam(lr=0.1, weight_decay=0.1, decoupled_weight_decay=True, maximize=True),
    "rprop": lambda: diffopt.rprop(lr=0.1),
    "adafactor": lambda: diffopt.adafactor(lr=0.1, weight_decay=0.01),
    "adafactor-accelerated-maximize": lambda: diffopt.adafactor(lr=0.1, weight_decay=0.01, maximize=True,
                                                                use_accelerated_op=True),
    "asgd": lambda: diffopt.asgd(lr=0.1, t0=5),
    "adam-schedule": lambda: diffopt.adam(lr=diffopt.linear_schedule(0.1, 0.01, 20)),
    "clipped-sgd": lambda: diffopt.chain(diffopt.clip_grad_norm(1.0), diffopt.sgd(lr=0.1)),
}


def _params(dtype=torch.float64):
    torch.manual_seed(0)
    return {"w": torch.randn(3, 2, dtype=dtype), "b": (torch.randn(2, dtype=dtype),
                                                       [torch.randn((), dtype=dtype)])}


def _loss(params):
    leaves = diffopt.pytree.tree_leaves(params)
    return sum(((leaf - 0.5) ** 2).sum() for leaf in leaves)


@pytest.fixture(params=sorted(ALIASES), ids=sorted(ALIASES))
def make(request):
    return ALIASES[request.param], request.param


def test_init_and_update_shapes(make):
    factory, _ = make
    tx = factory()
    params = _params()
    state = tx.init(params)
    grads = diffopt.tree_math.tree_ones_like(params)
    updates, new_state = tx.update(grads, state, params=params)
    assert diffopt.pytree.tree_structure(updates) == diffopt.pytree.tree_structure(params)
    for u, p in zip(diffopt.pytree.tree_leaves(updates), diffopt.pytree.tree_leaves(params)):
        assert u.shape == p.shape and u.dtype == p.dtype
        assert torch.isfinite(u).all()
    assert (diffopt.pytree.tree_structure(new_state)
            == diffopt.pytree.tree_structure(state))


def test_minimizes_quadratic(make):
    factory, name = make
    tx = factory()
    params = {k: v for k, v in _params().items()}
    state = tx.init(params)
    start = _loss(params).item()
    for _ in range(60):
        leaves = [p.detach().requires_grad_() for p in diffopt.pytree.tree_leaves(params)]
        params = diffopt.pytree.tree_unflatten(diffopt.pytree.tree_structure(params), leaves)
        grads = torch.autograd.grad(_loss(params), leaves)
        grads = diffopt.pytree.tree_unflatten(diffopt.pytree.tree_structure(params), list(grads))
        updates, state = tx.update(grads, state, params=params, inplace=False)
        params = diffopt.apply_updates(params, updates, inplace=False)
    end = _loss(params).item()
    if "maximize" in name:
        assert end > start
    else:
        assert end < 0.5 * start


def test_differentiable_end_to_end(make):
    factory, _ = make
    tx = factory()
    theta = _params()
    theta_leaves = [t.requires_grad_() for t in diffopt.pytree.tree_leaves(theta)]
    params, state = theta, tx.init(theta)
    for _ in range(3):
        leaves = diffopt.pytree.tree_leaves(params)
        grads = torch.autograd.grad(_loss(params), leaves, create_graph=True)
        grads = diffopt.pytree.tree_unflatten(diffopt.pytree.tree_structure(params), list(grads))
        updates, state = tx.update(grads, state, params=params, inplace=False)
        params = diffopt.apply_updates(params, updates, inplace=False)
    meta = torch.autograd.grad(_loss(params), theta_leaves)
    assert all(torch.isfinite(g).all() for g in meta)


def test_none_gradient_leaves_param_and_state(make):
    factory, _ = make
    tx = factory()
    params = [torch.ones(2, dtype=torch.float64), torch.ones(3, dtype=torch.float64)]
    state = tx.init(params)
    updates, new_state = tx.update([None, torch.ones(3, dtype=torch.float64)], state,
                                   params=params)
    assert updates[0] is None and updates[1] is not None
    new = diffopt.apply_updates(params, updates, inplace=False)
    assert torch.equal(new[0], params[0])
    # the state of the leaf without a gradient (the only shape-(2,) tensors) is carried over
    old_leaves = [t for t in diffopt.pytree.tree_leaves(state) if t.shape == (2,)]
    new_leaves = [t for t in diffopt.pytree.tree_leaves(new_state) if t.shape == (2,)]
    assert all(a is b for a, b in zip(old_leaves, new_leaves, strict=True))


def test_wrong_dtype_and_structure_raise(make):
    factory, _ = make
    tx = factory()
    params = [torch.ones(2, dtype=torch.float64)]
    state = tx.init(params)
    with pytest.raises(ValueError, match="different structures"):
        # stateful transforms catch it in update, stateless ones in apply_updates
        two = [torch.ones(2, dtype=torch.float64)] * 2
        updates, _ = tx.update(two, state, params=params * 2)
        diffopt.apply_updates(params, updates)
    stateful = any(isinstance(leaf, torch.Tensor) and leaf.dtype == torch.float64
                   for leaf in diffopt.pytree.tree_leaves(state))
    if stateful:
        with pytest.raises(TypeError, match="dtype"):
            tx.update([torch.ones(2, dtype=torch.float32)], state, params=params)


def test_integer_params_rejected():
    with pytest.raises(TypeError, match="floating point"):
        diffopt.adam().init([torch.ones(2, dtype=torch.int64)])


def test_alias_utils_is_public_with_the_use_chain_flat_switch():
    from diffopt.alias import utils

    assert utils.flip_sign_and_add_weight_decay is diffopt.alias._utils.flip_sign_and_add_weight_decay
    assert utils._get_use_chain_flat() is True
    params = {"w": torch.tensor([1.0, -2.0], dtype=torch.float64)}
    grads = {"w": torch.tensor([0.5, 0.5], dtype=torch.float64)}
    results = []
    try:
        for flat in (False, True):  # diffopt always chains flat: both settings agree
            utils._set_use_chain_flat(flat)
            assert utils._get_use_chain_flat() is flat
            tx = diffopt.adam(lr=0.1, weight_decay=0.1)
            results.append(tx.update(grads, tx.init(params), params=params)[0]["w"])
    finally:
        utils._set_use_chain_flat(True)
    torch.testing.assert_close(results[0], results[1])
    with pytest.raises(TypeError, match="bool"):
        utils._set_use_chain_flat(1)


def test_aliases_built_from_numbers_are_shared_and_behave_the_same():
    # sgd/adam with the same plain-number arguments return one (immutable) transformation; a
    # tensor or a schedule builds a new one, and invalid arguments raise on every call.
    assert diffopt.sgd(0.1) is diffopt.sgd(0.1) and diffopt.sgd(lr=0.1) is diffopt.sgd(lr=0.1)
    assert diffopt.adam(0.1, betas=(0.8, 0.9)) is diffopt.adam(0.1, betas=(0.8, 0.9))
    assert diffopt.adam(0.1, betas=(0.8, 0.9)) is not diffopt.adam(0.1, betas=(0.8, 0.95))
    assert diffopt.sgd(1) is not diffopt.sgd(1.0)
    lr = torch.tensor(0.1)
    assert diffopt.sgd(lr) is not diffopt.sgd(lr)
    assert diffopt.sgd(lambda count: 0.1) is not diffopt.sgd(lambda count: 0.1)
    for _ in range(2):
        with pytest.raises(ValueError, match="learning rate"):
            diffopt.sgd(-1.0)
    params = (torch.tensor([1.0, 2.0]),)
    for _ in range(2):  # the shared transformation keeps no state between uses
        tx = diffopt.sgd(0.5, momentum=0.9)
        state = tx.init(params)
        updates, state = tx.update((torch.tensor([1.0, -1.0]),), state, inplace=False)
        torch.testing.assert_close(updates[0], torch.tensor([-0.5, 0.5]))
