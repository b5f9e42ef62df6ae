r"""Adafactor's step (Shazeer & Stern, 2018), as torch.optim.Adafactor.

The second moment of a matrix-shaped parameter (or a batch of matrices: the last two dimensions)
is kept factored, as a row and a column average of :math:`g^2`; vectors and scalars keep a full
one. With :math:`\beta_{2,t} = 1 - t^{c}` (``beta2_decay`` :math:`c \le 0`) and
:math:`\rho_t = \min(\eta, 1/\sqrt t)`:

.. math::
    R_t = \mathrm{lerp}(R_{t-1}, \overline{g^2}^{\,\text{cols}}, t^{c}),\quad
    C_t = \mathrm{lerp}(C_{t-1}, \overline{g^2}^{\,\text{rows}}, t^{c}),\quad
    \hat V_t = \frac{R_t C_t}{\max(\bar R_t, \epsilon_1)},\\
    U_t = \frac{g_t}{\sqrt{\max(\hat V_t, \epsilon_1^2)}},\quad
    \theta_t = \theta_{t-1}(1 - \eta\lambda)
    - \frac{\max(\epsilon_2, \mathrm{RMS}(\theta_{t-1}))\,\rho_t}{\max(1, \mathrm{RMS}(U_t)/d)}\,U_t

The update includes the step size (it needs the parameters), so the alias adds no ``-lr``
scaling. Unlike torch, the two scale factors stay tensors (never read into Python), so the
update is differentiable through them and runs under ``torch.func`` transforms.

Example:
    >>> import torch
    >>> tx = scale_by_adafactor(lr=0.1)
    >>> p = [torch.ones(2, 2)]
    >>> tx.update([torch.ones(2, 2)], tx.init(p), params=p)[0]
    [tensor([[-0.1000, -0.1000],
            [-0.1000, -0.1000]])]
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from diffopt.base import GradientTransformation
from diffopt.transform._leafwise import check_leaf, flatten_updates, fused_op_cannot_read, unflatten

__all__ = ["ScaleByAdafactorState", "scale_by_accelerated_adafactor", "scale_by_adafactor"]


class ScaleByAdafactorState(NamedTuple):
    """State of :func:`scale_by_adafactor`: the (factored) second moments and the step count.

    Attributes:
        row_var: for parameters of two or more dimensions, the row averages (the last dimension
            reduced to 1); for the others, the full second moment.
        col_var: for parameters of two or more dimensions, the column averages (the
            second-to-last dimension reduced to 1); for the others, an empty tensor.
        count: number of updates made so far (an int64 0-d tensor).

    Example:
        >>> import torch
        >>> state = scale_by_adafactor().init({'w': torch.zeros(3, 2), 'b': torch.zeros(2)})
        >>> state.row_var['w'].shape, state.col_var['w'].shape, state.row_var['b'].shape
        (torch.Size([3, 1]), torch.Size([1, 2]), torch.Size([2]))
    """

    row_var: object
    col_var: object
    count: torch.Tensor


def _check(name: str, lr, beta2_decay: float, eps: tuple, d: float, weight_decay: float) -> None:
    if not isinstance(lr, torch.Tensor) and not lr >= 0.0:
        raise ValueError(f"{name}: invalid learning rate {lr}; it must be >= 0")
    if not beta2_decay <= 0.0:
        raise ValueError(f"{name}: beta2_decay must be <= 0, got {beta2_decay}")
    if len(eps) != 2 or (eps[0] is not None and not eps[0] >= 0.0) or not eps[1] >= 0.0:
        raise ValueError(f"{name}: eps must be a pair (eps1 or None, eps2) of non-negative numbers, got {eps!r}")
    if not d >= 1.0:
        raise ValueError(f"{name}: the clipping threshold d must be >= 1, got {d}")
    if not weight_decay >= 0.0:
        raise ValueError(f"{name}: weight_decay must be >= 0, got {weight_decay}")


def _factored(leaf: torch.Tensor) -> bool:
    return leaf.dim() > 1


def _init_leaf(name: str, leaf):
    if not isinstance(leaf, torch.Tensor):
        raise TypeError(f"{name}: params must be a pytree of tensors, found {type(leaf).__name__}")
    if not leaf.is_floating_point():
        raise TypeError(f"{name}: params must be real floating point tensors, found {leaf.dtype}")
    # new_zeros: the factors are tensors of the leaf's kind (a DTensor leaf's are DTensors, placed
    # like it), which the updates combine with the leaf's gradients.
    with torch.no_grad():
        if _factored(leaf):
            return leaf.new_zeros((*leaf.shape[:-1], 1)), leaf.new_zeros((*leaf.shape[:-2], 1, leaf.shape[-1]))
        return torch.zeros_like(leaf), leaf.new_zeros(0)


def scale_by_adafactor(lr=1e-2, beta2_decay: float = -0.8, eps: tuple[float | None, float] = (None, 1e-3),
                       d: float = 1.0, weight_decay: float = 0.0) -> GradientTransformation:
    """Replace updates by Adafactor's relative-step, factored-second-moment step.

    Args:
        lr: the learning rate :math:`\\eta` (a number or a tensor): it caps the relative step size
            and scales the weight decay.
        beta2_decay: the exponent :math:`c` of the second-moment decay :math:`1 - t^c`.
        eps: ``(eps1, eps2)``: the floor of the second moment (``None``: the parameter dtype's
            machine epsilon) and of the parameters' RMS.
        d: the clipping threshold of the update's RMS.
        weight_decay: the decoupled weight decay :math:`\\lambda`.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByAdafactorState`; its
        ``update`` needs ``params``.

    Example:
        >>> import torch
        >>> tx = scale_by_adafactor(lr=0.5, eps=(None, 0.0))
        >>> p = [torch.tensor([3.0, 4.0])]
        >>> tx.update([torch.tensor([1.0, -1.0])], tx.init(p), params=p)[0]  # RMS(p) * lr * sign(g)
        [tensor([-1.7678,  1.7678])]
    """
    name = "scale_by_adafactor"
    _check(name, lr, beta2_decay, eps, d, weight_decay)
    eps1_given, eps2 = eps

    def init_fn(params):
        import optree_core

        leaves, treespec = optree_core.tree_flatten(params)
        pairs = [_init_leaf(name, leaf) for leaf in leaves]
        return ScaleByAdafactorState(row_var=optree_core.tree_unflatten(treespec, [r for r, _ in pairs]),
                                     col_var=optree_core.tree_unflatten(treespec, [c for _, c in pairs]),
                                     count=torch.zeros((), dtype=torch.int64))

    def update_fn(updates, state, *, params=None, inplace=True):
        del inplace
        if params is None:
            raise ValueError(f"{name} needs params: call update(..., params=params)")
        treespec, grads, (rows, cols, leaves) = flatten_updates(name, updates, state.row_var, state.col_var, params)
        count = state.count + 1
        t = count.to(torch.float64)
        weight = torch.pow(t, beta2_decay)  # 1 - beta2_t
        rho = torch.clamp(torch.rsqrt(t), max=lr) if not isinstance(lr, torch.Tensor) else torch.minimum(
            lr.to(torch.float64), torch.rsqrt(t))
        new_updates, new_rows, new_cols = [], [], []
        for i, (g, row, col, p) in enumerate(zip(grads, rows, cols, leaves)):
            if g is None:
                new_updates.append(None)
                new_rows.append(row)
                new_cols.append(col)
                continue
            check_leaf(name, i, g, p)
            dtype = g.dtype
            eps1 = torch.finfo(p.dtype).eps if eps1_given is None else eps1_given
            w = weight.to(dtype)
            numel = p.numel()
            alpha = torch.clamp(torch.linalg.vector_norm(p) / numel**0.5, min=eps2) * rho.to(dtype)
            if _factored(g):
                sq = g * g
                row = torch.lerp(row, sq.mean(dim=-1, keepdim=True), w)
                col = torch.lerp(col, sq.mean(dim=-2, keepdim=True), w)
                estimate = (row @ col) / torch.clamp(row.mean(dim=-2, keepdim=True), min=eps1)
            else:
                row = torch.lerp(row, g * g, w)
                estimate = row
            u = torch.rsqrt(torch.clamp(estimate, min=eps1 * eps1)) * g
            denom = torch.clamp(torch.linalg.vector_norm(u) / (numel**0.5 * d), min=1.0)
            decay = -(lr * weight_decay) * p if weight_decay != 0.0 else 0.0
            new_updates.append(decay - (alpha / denom) * u)
            new_rows.append(row)
            new_cols.append(col)
        new_state = ScaleByAdafactorState(row_var=unflatten(treespec, new_rows), col_var=unflatten(treespec, new_cols),
                                          count=count)
        return unflatten(treespec, new_updates), new_state

    return GradientTransformation(init_fn, update_fn)


def scale_by_accelerated_adafactor(lr=1e-2, beta2_decay: float = -0.8, eps: tuple[float | None, float] = (None, 1e-3),
                                   d: float = 1.0, weight_decay: float = 0.0) -> GradientTransformation:
    """:func:`scale_by_adafactor` computed by fused-optim's fused, differentiable Adafactor op.

    Same arguments, state and results as :func:`scale_by_adafactor` (up to rounding; the
    meta-gradients too: the op's backward is exact through both scale factors and the row/column
    reductions). One op call per dtype and device, matrices and vectors apart. The op reads the
    step count as a Python number; when traced by ``torch.compile``, under ``torch.func.vmap``
    with a batched count, or with a tensor ``lr`` that requires grad, the plain transform's math
    runs instead.

    Args:
        lr, beta2_decay, eps, d, weight_decay: as in :func:`scale_by_adafactor`.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByAdafactorState`; its
        ``update`` needs ``params``.

    Example:
        >>> import torch
        >>> tx = scale_by_accelerated_adafactor(lr=0.5, eps=(None, 0.0))
        >>> p = [torch.tensor([3.0, 4.0])]
        >>> tx.update([torch.tensor([1.0, -1.0])], tx.init(p), params=p)[0]
        [tensor([-1.7678,  1.7678])]
    """
    name = "scale_by_accelerated_adafactor"
    _check(name, lr, beta2_decay, eps, d, weight_decay)
    plain = scale_by_adafactor(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d, weight_decay=weight_decay)

    def update_fn(updates, state, *, params=None, inplace=True):
        del inplace
        from diffopt.accelerated_op import fused_update

        if params is None:
            raise ValueError(f"{name} needs params: call update(..., params=params)")
        if fused_op_cannot_read(state.count) or (isinstance(lr, torch.Tensor) and lr.requires_grad):
            return plain.update(updates, state, params=params)
        treespec, grads, (rows, cols, leaves) = flatten_updates(name, updates, state.row_var, state.col_var, params)
        present = [i for i, g in enumerate(grads) if g is not None]
        for i in present:
            check_leaf(name, i, grads[i], leaves[i])
        count = state.count + 1
        step = int(count)
        new_updates, new_rows, new_cols = [None] * len(grads), list(rows), list(cols)
        if present:  # fused_update makes one op call per dtype and device
            factored = [_factored(leaves[i]) for i in present]
            out = fused_update("adafactor_update", [leaves[i] for i in present], [grads[i] for i in present],
                               [rows[i] if f else None for i, f in zip(present, factored)],
                               [cols[i] if f else None for i, f in zip(present, factored)],
                               [None if f else rows[i] for i, f in zip(present, factored)], step, lr=lr,
                               beta2_decay=beta2_decay, eps=eps, d=d, weight_decay=weight_decay)
            for j, (i, f) in enumerate(zip(present, factored)):
                new_updates[i] = out.params[j] - leaves[i]
                new_rows[i] = out.row_vars[j] if f else out.variances[j]
                if f:
                    new_cols[i] = out.col_vars[j]
        new_state = ScaleByAdafactorState(row_var=unflatten(treespec, new_rows), col_var=unflatten(treespec, new_cols),
                                          count=count)
        return unflatten(treespec, new_updates), new_state

    return GradientTransformation(plain.init, update_fn)
