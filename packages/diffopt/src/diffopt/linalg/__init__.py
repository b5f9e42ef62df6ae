"""Matrix-free linear algebra on pytrees: conjugate gradient, GMRES, BiCGSTAB, Neumann series.

Every solver takes the linear operator ``A`` either as a callable ``A(x)`` (a matrix-free
product, such as a Hessian-vector product) or as a tensor / pytree of matrices applied leaf by
leaf, and the right-hand side ``b`` as a tensor or any pytree of tensors.

Example:
    >>> import torch
    >>> from diffopt import linalg
    >>> A = torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64)
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> x = linalg.cg(lambda v: A @ v, b, rtol=1e-12)
    >>> torch.allclose(A @ x, b)
    True
"""

from diffopt.linalg import utils
from diffopt.linalg._krylov import ConvergenceWarning
from diffopt.linalg.bicgstab import bicgstab
from diffopt.linalg.cg import cg
from diffopt.linalg.gmres import gmres
from diffopt.linalg.neumann import NeumannDivergenceWarning, ns, ns_inv

__all__ = [
    "ConvergenceWarning",
    "NeumannDivergenceWarning",
    "bicgstab",
    "cg",
    "gmres",
    "ns",
    "ns_inv",
    "utils",
]
