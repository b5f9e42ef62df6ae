"""TorchOpt's ``torchopt.diff.implicit.nn`` path to :class:`diffopt.nn.ImplicitMetaGradientModule`.

Example:
    >>> from diffopt.diff.implicit.nn import ImplicitMetaGradientModule
    >>> import diffopt
    >>> ImplicitMetaGradientModule is diffopt.nn.ImplicitMetaGradientModule
    True
"""

from diffopt.diff.implicit.nn.module import ImplicitMetaGradientModule

__all__ = ["ImplicitMetaGradientModule"]
