r"""Adam's scaling: bias-corrected first moment over the root of the bias-corrected second moment.

.. math::
    m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \quad v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2,
    \quad u_t = \frac{m_t / (1-\beta_1^t)}{\sqrt{v_t / (1-\beta_2^t) + \epsilon_{root}} + \epsilon}

The square root has derivative 0 (not ``inf``) at 0, so meta-gradients stay exact and finite
where a gradient entry is exactly zero (dead ReLU units, unused parameters), unlike a plain
``torch.sqrt``, whose backward gives ``0 * inf = NaN`` there.

Example:
    >>> import torch
    >>> tx = scale_by_adam()
    >>> out, state = tx.update([torch.tensor([2.0, -3.0])], tx.init([torch.zeros(2)]))
    >>> torch.allclose(out[0], torch.tensor([1.0, -1.0]))  # the first step is sign(g), up to eps
    True
"""

from __future__ import annotations

import math
from typing import NamedTuple, cast

import torch

from diffopt.base import GradientTransformation
from diffopt.transform._leafwise import (
    bias_correction,
    can_use_foreach,
    check_leaf,
    flatten_updates,
    foreach_mul_scalar,
    fused_op_cannot_read,
    per_dtype,
    scale_leaf,
    scale_leaves,
    tensor_hyperparams,
    unflatten,
    zeros_like_params,
)
from diffopt.tree_math import safe_sqrt

__all__ = ["ScaleByAdamState", "scale_by_accelerated_adam", "scale_by_adam"]


class ScaleByAdamState(NamedTuple):
    """State of :func:`scale_by_adam`: first moments, second moments, step count.

    Attributes:
        mu: exponential moving average of the updates, shaped like the parameters.
        nu: exponential moving average of the squared updates, shaped like the parameters.
        count: number of updates made so far (an int64 0-d tensor).

    Example:
        >>> import torch
        >>> tx = scale_by_adam()
        >>> _, state = tx.update({'w': torch.tensor([2.0, -1.0])}, tx.init({'w': torch.zeros(2)}))
        >>> state.mu['w'], state.nu['w'], int(state.count)
        (tensor([ 0.2000, -0.1000]), tensor([0.0040, 0.0010]), 1)
    """

    mu: object
    nu: object
    count: torch.Tensor


def _check_hyper(name: str, b1, b2, eps, eps_root) -> None:
    for label, beta in (("b1", b1), ("b2", b2)):
        if not isinstance(beta, torch.Tensor) and not 0.0 <= beta < 1.0:
            raise ValueError(f"{name}: {label} must be in [0, 1), got {beta}")
    if eps < 0.0 or eps_root < 0.0:
        raise ValueError(f"{name}: eps and eps_root must be non-negative, got {eps}, {eps_root}")


def _init_fn(name: str, moment_requires_grad: bool):
    def init_fn(params):
        mu = zeros_like_params(name, params, requires_grad=moment_requires_grad)
        nu = zeros_like_params(name, params, requires_grad=moment_requires_grad)
        return ScaleByAdamState(mu=mu, nu=nu, count=torch.zeros((), dtype=torch.int64))

    return init_fn


def _adam_multi_tensor(grads: list, mus: list, nus: list, step: int, b1: float, b2: float,
                       eps: float, eps_root: float, factor: float,
                       add_to: list | None) -> tuple[list, list, list]:
    r"""Adam on lists of leaves with multi-tensor ops, for :func:`can_use_foreach` leaves.

    The bias corrections are Python numbers here (``step`` is), so they fold into two scalars:

    .. math::
        \frac{m_t / c_1}{\sqrt{v_t / c_2 + \epsilon_{root}} + \epsilon}
        = \frac{\sqrt{c_2}}{c_1} \cdot
          \frac{m_t}{\sqrt{v_t + \epsilon_{root} c_2} + \epsilon \sqrt{c_2}},
        \qquad c_i = 1 - \beta_i^t,

    which makes one step eight ops for all leaves together (``lerp``, ``mul`` and ``lerp``,
    ``clamp_min`` and ``sqrt``, ``add``, ``div``, and ``add`` into ``add_to`` or ``mul``), each
    one autograd node: the per-leaf form builds about fourteen nodes per leaf. Where ``eps_root``
    is 0 the root is taken of ``max(v, tiny)`` (``tiny``: the dtype's smallest normal number),
    whose derivative is 0 where ``v`` is 0 (as :func:`~diffopt.tree_math.safe_sqrt`'s) and whose
    value there, ``sqrt(tiny)`` (1e-19 in float32, 1e-154 in float64), is absorbed by ``eps``
    (the caller takes this path only when ``eps`` or ``eps_root`` is positive, so that both
    paths give the same numbers).

    Returns:
        ``(outs, mus, nus)``: ``factor`` times the directions (plus ``add_to``), new moments.
    """
    bc1, bc2 = 1.0 - b1 ** step, 1.0 - b2 ** step
    root_bc2 = math.sqrt(bc2)
    mus = torch._foreach_lerp(mus, grads, 1.0 - b1)
    # Both moments as lerps: a list-by-scalar mul wraps the scalar into a tensor per leaf.
    nus = torch._foreach_lerp(nus, torch._foreach_mul(grads, grads), 1.0 - b2)
    if eps_root:
        denom = torch._foreach_sqrt(torch._foreach_add(nus, eps_root * bc2))
    else:
        denom = torch._foreach_sqrt(torch._foreach_clamp_min(nus, torch.finfo(nus[0].dtype).tiny))
    if eps:
        denom = torch._foreach_add(denom, eps * root_bc2)
    # Not ``_foreach_addcdiv``: its backward fails on some lists of shapes in torch 2.13
    # (``select(): index out of range``, e.g. shapes (6, 2), (6,), (1, 6), (1,)).
    directions = torch._foreach_div(mus, denom)
    step_size = factor * root_bc2 / bc1
    if add_to is not None:
        return cast(list, torch._foreach_add(add_to, directions, alpha=step_size)), mus, nus
    return foreach_mul_scalar(cast(list, directions), step_size), mus, nus


def scale_by_adam(
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    moment_requires_grad: bool = False,
) -> GradientTransformation:
    """Rescale updates by Adam's moment estimates (Kingma & Ba, 2014, arXiv:1412.6980).

    Args:
        b1: decay of the first moment.
        b2: decay of the second moment.
        eps: added to the denominator outside the square root.
        eps_root: added inside the square root (keeps meta-gradients of the root bounded).
        moment_requires_grad: create the moments with ``requires_grad=True``.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByAdamState`.

    Example:
        The first step is the sign of the gradient (without ``eps``), up to the rounding of the
        bias corrections and the root: rounded, since its last bit differs between machines.

        >>> import torch
        >>> tx = scale_by_adam(eps=0.0)
        >>> state = tx.init({'w': torch.zeros(1)})
        >>> u, state = tx.update({'w': torch.tensor([0.5])}, state)
        >>> torch.round(u['w'], decimals=4)
        tensor([1.])
    """
    _check_hyper("scale_by_adam", b1, b2, eps, eps_root)

    numbers = not any(isinstance(h, torch.Tensor) for h in (b1, b2, eps, eps_root))

    def scaled_update(updates, state, factor=1.0, add_to=None):
        """``factor`` times the update, added to the leaves ``add_to`` when given; new state."""
        treespec, grads, (mus, nus) = flatten_updates("scale_by_adam", updates, state.mu, state.nu)
        count = state.count + 1
        present = [i for i, g in enumerate(grads) if g is not None]
        for i in present:
            check_leaf("scale_by_adam", i, grads[i], mus[i])
        gs, ms, vs = ([leaves[i] for i in present] for leaves in (grads, mus, nus))
        if numbers and (eps or eps_root) and can_use_foreach(gs + ms + vs):
            outs, ms, vs = _adam_multi_tensor(
                gs, ms, vs, int(count), b1, b2, eps, eps_root, factor,
                None if add_to is None else [add_to[i] for i in present])
        else:
            # 0-d tensors, not Python floats: the count may be batched by vmap (one per model).
            bc1 = per_dtype(lambda dtype: bias_correction(b1, count, dtype))
            bc2 = per_dtype(lambda dtype: bias_correction(b2, count, dtype))
            outs = []
            for j, (g, m, v) in enumerate(zip(gs, ms, vs)):
                # Fused forms (add with alpha, addcmul) keep the graph small for the meta-backward.
                m = torch.add(m * b1, g, alpha=1 - b1) if not isinstance(b1, torch.Tensor) \
                    else m * b1 + g * (1 - b1)
                v = torch.addcmul(v * b2, g, g, value=1 - b2) if not isinstance(b2, torch.Tensor) \
                    else v * b2 + g * g * (1 - b2)
                denom = safe_sqrt(v / bc2(v.dtype) + eps_root) if eps_root \
                    else safe_sqrt(v / bc2(v.dtype))
                out = (m / bc1(m.dtype)) / (denom + eps)
                outs.append(scale_leaf(out, factor, None if add_to is None else add_to[present[j]]))
                ms[j], vs[j] = m, v
        new_updates = list(grads) if add_to is None else list(add_to)
        new_mus, new_nus = list(mus), list(nus)
        for j, i in enumerate(present):
            new_updates[i], new_mus[i], new_nus[i] = outs[j], ms[j], vs[j]
        new_state = ScaleByAdamState(
            mu=unflatten(treespec, new_mus), nu=unflatten(treespec, new_nus), count=count
        )
        return (unflatten(treespec, new_updates) if add_to is None else new_updates), new_state

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        return scaled_update(updates, state)

    # A following constant scale (and add) fuses in.
    update_fn.scaled_update = scaled_update  # type: ignore[attr-defined]
    return GradientTransformation(_init_fn("scale_by_adam", moment_requires_grad), update_fn)


def scale_by_accelerated_adam(
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    moment_requires_grad: bool = False,
) -> GradientTransformation:
    """:func:`scale_by_adam` computed by fused-optim's fused, differentiable kernel.

    Same arguments, state and results as :func:`scale_by_adam` (up to rounding); the moment
    update, bias correction and direction run in one fused op per leaf list whose backward is
    hand-written, which builds far fewer autograd nodes.

    The fused op takes the step as a Python int, read from the (plain, unbatched) count; when
    the count is batched by ``torch.func.vmap`` (an ensemble whose ``init`` ran under vmap, one
    count per member) or traced by ``torch.compile`` (which cannot read it into Python without a
    graph break) the update runs :func:`scale_by_adam`'s math instead, with the same results.
    Under a task-batched ``vmap`` (shared count) the op itself runs batched, which needs
    fused-optim's vmap rule for ``adam_direction``. Hyper-parameters given as tensors (learned
    ``b1``...) make it :func:`scale_by_adam` itself, whose meta-gradients are exact.

    Args:
        b1: decay of the first moment.
        b2: decay of the second moment.
        eps: added to the denominator outside the square root.
        eps_root: added inside the square root (keeps meta-gradients of the root bounded).
        moment_requires_grad: create the moments with ``requires_grad=True``.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByAdamState`.

    Raises:
        ImportError: at update time, when the ``fused-optim`` package is not installed.

    Example:
        >>> import torch
        >>> grads = {'w': torch.tensor([0.5, -2.0])}
        >>> fused, plain = scale_by_accelerated_adam(), scale_by_adam()
        >>> u_fused, _ = fused.update(grads, fused.init({'w': torch.zeros(2)}))
        >>> u_plain, _ = plain.update(grads, plain.init({'w': torch.zeros(2)}))
        >>> torch.round(u_fused['w'], decimals=4), bool(torch.allclose(u_fused['w'], u_plain['w']))
        (tensor([ 1., -1.]), True)
    """
    _check_hyper("scale_by_accelerated_adam", b1, b2, eps, eps_root)
    plain = scale_by_adam(b1, b2, eps, eps_root, moment_requires_grad)
    if tensor_hyperparams(b1, b2, eps, eps_root):  # the fused op takes numbers
        return plain

    def scaled_update(updates, state, factor=1.0, add_to=None):
        """``factor`` times the update, added to the leaves ``add_to`` when given; new state."""
        from diffopt.accelerated_op import adam_direction

        name = "scale_by_accelerated_adam"
        if fused_op_cannot_read(state.count):
            # The fused op takes the step as a Python int; a count batched by vmap (an ensemble
            # initialized under vmap) has one per model, and a count traced by torch.compile has
            # no value to read without a graph break, so the same math runs unfused (where
            # Inductor fuses it into its own kernels, backward included).
            return plain.update.scaled_update(updates, state, factor, add_to)
        treespec, grads, (mus, nus) = flatten_updates(name, updates, state.mu, state.nu)
        count = state.count + 1
        present = [i for i, g in enumerate(grads) if g is not None]
        for i in present:
            check_leaf(name, i, grads[i], mus[i])
        new_updates = list(grads) if add_to is None else list(add_to)
        new_mus, new_nus = list(mus), list(nus)
        if present:
            directions, out_mus, out_nus = adam_direction(
                [grads[i] for i in present], [mus[i] for i in present],
                [nus[i] for i in present], int(count),  # a plain (unbatched) 0-d tensor
                beta1=b1, beta2=b2, eps=eps, eps_root=eps_root,
            )
            outs = scale_leaves(directions, factor,
                                None if add_to is None else [add_to[i] for i in present])
            for j, i in enumerate(present):
                new_updates[i] = outs[j]
                new_mus[i] = out_mus[j]
                new_nus[i] = out_nus[j]
        new_state = ScaleByAdamState(
            mu=unflatten(treespec, new_mus), nu=unflatten(treespec, new_nus), count=count
        )
        return (unflatten(treespec, new_updates) if add_to is None else new_updates), new_state

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        return scaled_update(updates, state)

    # A following constant scale (and add) fuses in.
    update_fn.scaled_update = scaled_update  # type: ignore[attr-defined]
    return GradientTransformation(
        _init_fn("scale_by_accelerated_adam", moment_requires_grad), update_fn
    )
