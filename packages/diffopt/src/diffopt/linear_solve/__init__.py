"""Linear solvers for implicit differentiation: ``solve(matvec, b) -> x`` with ``matvec(x) = A x``.

Each solver can be called directly, ``solve_cg(matvec, b, maxiter=20)``, or configured first and
called later, ``solver = solve_cg(maxiter=20); x = solver(matvec, b)``, which is the form
:func:`diffopt.diff.implicit.custom_root` and
:class:`diffopt.nn.ImplicitMetaGradientModule` take (as in TorchOpt).

Example:
    >>> import torch
    >>> from diffopt import linear_solve
    >>> A = torch.tensor([[3.0, 1.0], [1.0, 2.0]], dtype=torch.float64)
    >>> b = torch.tensor([1.0, 1.0], dtype=torch.float64)
    >>> solver = linear_solve.solve_cg(rtol=1e-12)
    >>> x = solver(lambda v: A @ v, b)
    >>> torch.allclose(A @ x, b)
    True
"""

from diffopt.linear_solve.bicgstab import solve_bicgstab
from diffopt.linear_solve.cg import solve_cg
from diffopt.linear_solve.dense import solve_cholesky, solve_lu
from diffopt.linear_solve.gmres import solve_gmres
from diffopt.linear_solve.inv import solve_inv
from diffopt.linear_solve.normal_cg import solve_normal_cg

__all__ = [
    "solve_bicgstab",
    "solve_cg",
    "solve_cholesky",
    "solve_gmres",
    "solve_inv",
    "solve_lu",
    "solve_normal_cg",
]
