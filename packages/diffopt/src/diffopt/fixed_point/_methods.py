"""The update rules of :func:`diffopt.fixed_point.solve`: given the iterate ``z`` and its residual
``r = f(z) - z`` (flat vectors), propose the next iterate.

Each method is a small class with ``propose(z, r) -> z_next``; the driver loop in ``solver.py``
owns evaluation, stopping and reporting, so these hold only the algebra of one step.
"""

from __future__ import annotations

import torch

__all__: list[str] = []


class Iteration:
    """Plain (Picard) iteration ``z <- f(z)``, i.e. ``z + r``."""

    def propose(self, z: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return z + r


class _History:
    """The last ``memory`` pairs of difference vectors, as the rows of two ``(memory, n)`` buffers
    filled in a circle (the oldest pair is overwritten once they are full)."""

    def __init__(self, memory: int) -> None:
        self.memory = memory
        self.count = 0  # pairs ever stored
        self.first: torch.Tensor | None = None
        self.second: torch.Tensor | None = None

    def push(self, a: torch.Tensor, b: torch.Tensor) -> None:
        if self.first is None or self.second is None:
            self.first = a.new_empty(self.memory, a.numel())
            self.second = b.new_empty(self.memory, b.numel())
        row = self.count % self.memory
        self.first[row] = a
        self.second[row] = b
        self.count += 1

    def rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        size = min(self.count, self.memory)
        assert self.first is not None and self.second is not None
        return self.first[:size], self.second[:size]

    def clear(self) -> None:
        self.count = 0


class Anderson:
    r"""Anderson acceleration (type II, Walker & Ni 2011), with mixing and regularization.

    With ``dX`` and ``dR`` the differences of the last ``m`` iterates and residuals,
    :math:`\gamma = \arg\min \lVert r - dR\,\gamma\rVert^2 + \lambda \bar s \lVert\gamma\rVert^2`
    (:math:`\bar s` the mean squared norm of ``dR``'s rows, so ``regularization`` is scale-free)
    and :math:`z_{+} = z + \beta r - (dX + \beta\, dR)^\top \gamma`. The small ``m x m`` system
    is solved in float64 whatever the iterate's dtype.
    """

    def __init__(self, memory: int, beta: float, regularization: float) -> None:
        self.history = _History(memory)
        self.beta = beta
        self.regularization = regularization
        self.previous: tuple[torch.Tensor, torch.Tensor] | None = None

    def propose(self, z: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        if self.previous is not None:
            self.history.push(z - self.previous[0], r - self.previous[1])
        self.previous = (z, r)
        step = z + self.beta * r
        if self.history.count == 0:
            return step
        dx, dr = self.history.rows()
        dr64 = dr.double()
        gram = dr64 @ dr64.T
        scale = float(torch.diagonal(gram).mean())
        if scale == 0.0:  # the residual no longer changes: no secant information
            return step
        gram += self.regularization * scale * torch.eye(len(gram), dtype=gram.dtype,
                                                        device=gram.device)
        gamma, info = torch.linalg.solve_ex(gram, dr64 @ r.double())
        if int(info) != 0 or not bool(torch.isfinite(gamma).all()):
            self.history.clear()  # a degenerate history: restart from a plain mixing step
            return step
        gamma = gamma.to(r.dtype)
        return step - (dx + self.beta * dr).T @ gamma


class Broyden:
    r"""Good Broyden's method on the residual ``g(z) = f(z) - z``, in low-rank inverse form.

    The inverse Jacobian estimate is :math:`H = -I + \sum_i u_i v_i^\top` (so the first step is
    a plain iteration) and the step is :math:`z_{+} = z - H r`. After each step, with
    :math:`s = z_{+} - z` and :math:`y = r_{+} - r`, the good-Broyden (Sherman-Morrison) update
    appends :math:`v = H^\top s` and :math:`u = (s - H y) / (v^\top y)`. Keeping every pair is
    the exact (dense) method; with ``memory`` pairs the estimate restarts from ``-I`` when full.
    """

    def __init__(self, memory: int) -> None:
        self.history = _History(memory)  # rows: u_i (first), v_i (second)
        self.previous: tuple[torch.Tensor, torch.Tensor] | None = None

    def _apply(self, x: torch.Tensor) -> torch.Tensor:  # H x
        if self.history.count == 0:
            return -x
        u, v = self.history.rows()
        return u.T @ (v @ x) - x

    def _apply_transposed(self, x: torch.Tensor) -> torch.Tensor:  # H^T x
        if self.history.count == 0:
            return -x
        u, v = self.history.rows()
        return v.T @ (u @ x) - x

    def propose(self, z: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        if self.previous is not None:
            s, y = z - self.previous[0], r - self.previous[1]
            if self.history.count == self.history.memory:
                # Full: restart from H = -I. (Dropping only the oldest pair leaves the later ones,
                # built on top of it, inconsistent, and the iteration can blow up.)
                self.history.clear()
            v = self._apply_transposed(s)
            denominator = float(torch.dot(v, y))
            size = float(torch.linalg.vector_norm(v) * torch.linalg.vector_norm(y))
            # Skip an update whose denominator vanishes (it would blow H up).
            if size > 0.0 and abs(denominator) > 1e3 * torch.finfo(r.dtype).eps * size:
                self.history.push((s - self._apply(y)) / denominator, v)
        self.previous = (z, r)
        return z - self._apply(r)
