"""Gradient-graph visualization (TorchOpt's ``torchopt.visual``).

:func:`make_dot` draws the autograd graph behind a tensor with Graphviz, naming the tensors the
caller names (meta-parameters, each inner step's parameters) and drawing each fused-optim update
as one node named after its optimizer. Rendering (``.render``, ``.pipe``) needs Graphviz's ``dot``
executable; building the graph needs only the ``graphviz`` Python package.

Example:
    >>> import torch
    >>> from diffopt import visual
    >>> x = torch.ones(1, requires_grad=True)
    >>> visual.make_dot(x * 3, params={'x': x}).source.count('MulBackward0')
    1
"""

from diffopt.visual.dot import make_dot, resize_graph
from diffopt.visual.render import GraphvizNotFoundError, dot_available

__all__ = ["GraphvizNotFoundError", "dot_available", "make_dot", "resize_graph"]
