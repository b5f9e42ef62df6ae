"""Routing of ``use_accelerated_op=True`` to fused-optim's fused, differentiable kernels.

The fused ops live in the separate ``fused-optim`` package; this module is the only place diffopt
touches them, so the plain and accelerated paths differ in one call. TorchOpt's names are here
too: :class:`AdamOp` (in :mod:`diffopt.accelerated_op.adam_op`) and :func:`is_available`, an
alias of :func:`accelerated_op_available`.

Example:
    >>> isinstance(accelerated_op_available(), bool), is_available is accelerated_op_available
    (True, True)
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from diffopt.accelerated_op import adam_op
from diffopt.accelerated_op.adam_op import AdamOp
from diffopt.typing import Device

__all__ = ["AdamOp", "accelerated_op_available", "adam_direction", "adam_op", "fused_update", "is_available"]
__all__ += ["adan_direction", "lion_direction", "muon_direction", "muon_lr_scale", "newton_schulz", "shape_batches"]

_MISSING = (
    "use_accelerated_op=True needs the fused-optim package, which is not installed; "
    "install it (pip install 'fused-optim>=0.1,<0.2') or pass use_accelerated_op=False"
)


def _functional():
    try:
        from fused_optim import functional
    except ImportError as error:
        raise ImportError(_MISSING) from error
    return functional


def accelerated_op_available(devices: Device | Iterable[Device] | None = None) -> bool:
    """Whether the fused ops can run on ``devices`` (default: both CUDA and the CPU).

    As in TorchOpt, the call without ``devices`` asks about CUDA and the CPU together, so it is
    ``False`` on a machine without CUDA; ask ``accelerated_op_available('cpu')`` for the CPU alone.
    A device counts when the op runs there: the ``meta`` device does (fused-optim registers
    shape-only implementations, as :mod:`torch.compile` needs).

    Args:
        devices: a device or devices to check (a :class:`torch.device`, a string such as
            ``'cuda:0'``, or a CUDA device index).

    Returns:
        ``True`` if fused-optim is installed and its Adam op runs on every device given.

    Example:
        >>> accelerated_op_available('cpu')  # fused-optim is a dependency and has a CPU kernel
        True
        >>> accelerated_op_available() == torch.cuda.is_available()
        True
    """
    try:
        functional = _functional()
    except ImportError:
        return False
    if devices is None:
        devices = ["cuda", "cpu"]
    elif isinstance(devices, (str, int, torch.device)):
        devices = [devices]
    try:
        for device in devices:
            device = torch.device(device)  # an int is a CUDA index, as in torch
            if device.type == "cuda" and not torch.cuda.is_available():
                return False
            g = torch.ones(1, device=device)
            functional.adam_direction([g], [torch.zeros_like(g)], [torch.zeros_like(g)], 1,
                                      beta1=0.9, beta2=0.999, eps=1e-8, eps_root=0.0)
    except Exception:
        return False
    return True


def adam_direction(grads: list, exp_avgs: list, exp_avg_sqs: list, step: int, *, beta1: float,
                   beta2: float, eps: float, eps_root: float = 0.0) -> tuple[list, list, list]:
    """Adam's direction and new moments for lists of tensors, by fused-optim's fused op.

    Computes ``m' = b1 m + (1-b1) g``, ``v' = b2 v + (1-b2) g^2`` and
    ``d = (m'/(1-b1^step)) / (sqrt(v'/(1-b2^step) + eps_root) + eps)``, differentiably.

    Args:
        grads: gradients.
        exp_avgs: first moments.
        exp_avg_sqs: second moments.
        step: the step count after incrementing (``>= 1``).
        beta1: decay of the first moment.
        beta2: decay of the second moment.
        eps: added outside the root.
        eps_root: added inside the root.

    Returns:
        ``(directions, new_exp_avgs, new_exp_avg_sqs)``.

    Raises:
        ImportError: if fused-optim is not installed.

    Example:
        >>> import torch
        >>> if accelerated_op_available('cpu'):
        ...     d, m, v = adam_direction([torch.ones(1)], [torch.zeros(1)], [torch.zeros(1)], 1,
        ...                              beta1=0.9, beta2=0.999, eps=0.0)
        ...     assert torch.allclose(d[0], torch.ones(1))
    """
    return _call("adam_direction", grads, exp_avgs, exp_avg_sqs, step, beta1=beta1, beta2=beta2, eps=eps,
                 eps_root=eps_root)


def lion_direction(grads: list, exp_avgs: list, *, beta1: float, beta2: float) -> tuple[list, list]:
    """Lion's direction ``sign(b1 m + (1-b1) g)`` and new momentum ``b2 m + (1-b2) g``, fused.

    Runs fused-optim's ``lion_update`` on zero parameters with a unit learning rate and no decay:
    its new parameters are minus the direction. The direction carries no gradient (``sign``); the
    momentum's does, through the op's hand-written backward.

    Args:
        grads: gradients.
        exp_avgs: momenta.
        beta1: interpolation weight of the momentum in the direction.
        beta2: decay of the momentum.

    Returns:
        ``(directions, new_exp_avgs)``.

    Raises:
        ImportError: if fused-optim is not installed.

    Example:
        >>> import torch
        >>> if accelerated_op_available('cpu'):
        ...     d, m = lion_direction([torch.tensor([2.0, -1.0])], [torch.zeros(2)], beta1=0.9, beta2=0.99)
        ...     assert d[0].tolist() == [1.0, -1.0]
    """
    new = _call("lion_update", [torch.zeros_like(g) for g in grads], grads, exp_avgs, lr=1.0,
                betas=(beta1, beta2), weight_decay=0.0)
    return [0 - p for p in new.params], new.exp_avgs  # 0 - p, not -p: a zero direction stays +0


def adan_direction(grads: list, exp_avgs: list, exp_avg_diffs: list, exp_avg_sqs: list, prev_grads: list,
                   step: int, *, beta1: float, beta2: float, beta3: float,
                   eps: float) -> tuple[list, list, list, list, list]:
    """Adan's direction and new state for lists of tensors, by fused-optim's fused op.

    Runs ``adan_update`` on zero parameters with a unit learning rate and no decay: its new
    parameters are minus the direction ``(m'/b1 + beta2 v'/b2) / (sqrt(n'/b3) + eps)``
    (:func:`diffopt.transform.scale_by_adan` states it in full).

    Args:
        grads: gradients.
        exp_avgs, exp_avg_diffs, exp_avg_sqs: the three moments.
        prev_grads: the previous step's gradients (not read when ``step == 1``).
        step: the step count after incrementing (``>= 1``).
        beta1, beta2, beta3: the moments' decays.
        eps: added outside the root.

    Returns:
        ``(directions, new_exp_avgs, new_exp_avg_diffs, new_exp_avg_sqs, new_prev_grads)``.

    Raises:
        ImportError: if fused-optim is not installed.

    Example:
        >>> import torch
        >>> if accelerated_op_available('cpu'):
        ...     z = [torch.zeros(1)]
        ...     d, *_ = adan_direction([torch.ones(1)], z, z, z, z, 1, beta1=0.98, beta2=0.92, beta3=0.99, eps=0.0)
        ...     assert torch.allclose(d[0], torch.ones(1))
    """
    new = _call("adan_update", [torch.zeros_like(g) for g in grads], grads, exp_avgs, exp_avg_diffs, exp_avg_sqs,
                prev_grads, step, lr=1.0, betas=(beta1, beta2, beta3), eps=eps)
    return ([0 - p for p in new.params], new.exp_avgs, new.exp_avg_diffs, new.exp_avg_sqs, new.prev_grads)


def muon_direction(grads: list, exp_avgs: list, *, momentum: float, nesterov: bool) -> tuple[list, list]:
    """Muon's momentum ``b' = lerp(b, g, 1 - momentum)`` and direction (``lerp(g, b', momentum)``
    with ``nesterov``, else ``b'``), by fused-optim's fused, differentiable ``muon_direction``.

    Args:
        grads: gradients (matrices).
        exp_avgs: momentum buffers.
        momentum: the momentum.
        nesterov: whether the direction is the Nesterov blend.

    Returns:
        ``(directions, new_exp_avgs)``.

    Raises:
        ImportError: if fused-optim is not installed.

    Example:
        >>> import torch
        >>> if accelerated_op_available('cpu'):
        ...     d, b = muon_direction([torch.ones(1, 2)], [torch.zeros(1, 2)], momentum=0.5, nesterov=False)
        ...     assert d[0].tolist() == [[0.5, 0.5]]
    """
    return _call("muon_direction", grads, exp_avgs, momentum=momentum, nesterov=nesterov)


def _ops():
    _functional()  # the same ImportError when fused-optim is missing
    from fused_optim import ops

    return ops


def newton_schulz(matrices: torch.Tensor, coefficients, steps: int, eps: float, *,
                  dtype: torch.dtype | None = torch.bfloat16) -> torch.Tensor:
    """fused-optim's batched, differentiable Newton-Schulz orthogonalization (Muon's).

    See ``fused_optim.ops.newton_schulz``: a batch ``(n, A, B)`` of matrices, one batched
    matrix-product chain, in ``dtype`` (``None``: the matrices' own).

    Args:
        matrices: A batch ``(n, A, B)`` of matrices.
        coefficients, steps, eps: The iteration's ``(a, b, c)``, its number of steps and the floor of
            the norm, as torch.optim.Muon's ``ns_coefficients``, ``ns_steps`` and ``eps``.
        dtype: The precision of the iteration (``None``: the matrices' own).

    Example:
        >>> import torch
        >>> newton_schulz(torch.ones(3, 2, 4), (3.4445, -4.7750, 2.0315), 5, 1e-7).shape
        torch.Size([3, 2, 4])
    """
    return _ops().newton_schulz(matrices, coefficients, steps, eps, dtype=dtype)


def muon_lr_scale(shape, adjust_lr_fn: str | None) -> float:
    """torch.optim.Muon's learning-rate factor for a matrix of ``shape`` (``fused_optim.ops.muon_lr_scale``).

    Args:
        shape: The matrix's shape ``(A, B)``.
        adjust_lr_fn: ``None``, ``"original"`` or ``"match_rms_adamw"``.

    Example:
        >>> muon_lr_scale((8, 2), None)
        2.0
    """
    return _ops().muon_lr_scale(shape, adjust_lr_fn)


def shape_batches(tensors: list) -> dict:
    """The indices of ``tensors`` by shape (``fused_optim.ops.shape_batches``): Muon's batches.

    Args:
        tensors: Tensors of any shapes.

    Example:
        >>> import torch
        >>> shape_batches([torch.zeros(2, 2), torch.zeros(1, 2), torch.zeros(2, 2)])
        {(2, 2): [0, 2], (1, 2): [1]}
    """
    return _ops().shape_batches(tensors)


def fused_update(name: str, *args, **kwargs):
    """Calls ``fused_optim.functional.<name>``: one fused, differentiable optimizer update.

    The accelerated transforms (:func:`~diffopt.transform.scale_by_accelerated_nadam`...) reach
    fused-optim through this one function.

    Args:
        name: the functional update, e.g. ``'nadam_update'``.
        *args, **kwargs: its arguments.

    Returns:
        The update's result (a NamedTuple of lists of new tensors).

    Raises:
        ImportError: if fused-optim is not installed.

    Example:
        >>> import torch
        >>> if accelerated_op_available('cpu'):
        ...     out = fused_update('sgd_update', [torch.ones(1)], [torch.ones(1)], lr=0.5)
        ...     assert torch.equal(out.params[0], torch.full((1,), 0.5))
    """
    return _call(name, *args, **kwargs)


def _call(name: str, *args, **kwargs):
    """``fused_optim.functional.<name>(*args, **kwargs)``, one call per dtype and device.

    A fused op takes tensors of one dtype on one device (its kernel is compiled per dtype, as
    torch's fused kernels are), while a parameter tree may mix them (float32 with float64, CPU
    with CUDA); the plain transforms handle any mix. So the leading list arguments (params or
    grads first, then the state lists, ``None`` entries allowed) are cut by the first list's
    (dtype, device), one call runs per group, and the results' lists are put back in the tree's
    order. The results' other fields (NAdam's momentum product) depend on no tensor list and are
    the same for every group.
    """
    update = getattr(_functional(), name)
    n_lists = next((k for k, a in enumerate(args) if not isinstance(a, (list, tuple))), len(args))
    lists, rest = args[:n_lists], args[n_lists:]
    groups: dict[tuple, list[int]] = {}
    for i, t in enumerate(lists[0] if lists else ()):
        groups.setdefault((t.dtype, t.device), []).append(i)
    if len(groups) <= 1:
        return update(*args, **kwargs)
    size = len(lists[0])
    parts = [(indices, update(*[[values[i] for i in indices] if values else values for values in lists], *rest,
                              **kwargs)) for indices in groups.values()]
    merged = []
    for k, first in enumerate(parts[0][1]):
        if not isinstance(first, list):
            merged.append(first)
            continue
        if not any(result[k] for _, result in parts):  # an output this configuration has not
            merged.append([])
            continue
        values = [None] * size
        for indices, result in parts:
            for i, value in zip(indices, result[k]):
                values[i] = value
        merged.append(values)
    first_result = parts[0][1]
    return type(first_result)(*merged) if hasattr(first_result, "_fields") else tuple(merged)


is_available = accelerated_op_available
