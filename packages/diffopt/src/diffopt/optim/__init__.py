"""PyTorch-style optimizers, differentiable meta-optimizers and the functional wrapper.

Example:
    >>> import diffopt
    >>> diffopt.optim.Adam is diffopt.Adam
    True
"""

from diffopt.optim import func, meta
from diffopt.optim.adadelta import AdaDelta, Adadelta
from diffopt.optim.adagrad import AdaGrad, Adagrad
from diffopt.optim.adam import Adam
from diffopt.optim.adamax import AdaMax, Adamax
from diffopt.optim.adamw import AdamW
from diffopt.optim.adan import Adan
from diffopt.optim.base import Optimizer
from diffopt.optim.func import FuncOptimizer
from diffopt.optim.lion import Lion
from diffopt.optim.meta import (
    MetaAdaDelta,
    MetaAdadelta,
    MetaAdaGrad,
    MetaAdagrad,
    MetaAdam,
    MetaAdaMax,
    MetaAdamax,
    MetaAdamW,
    MetaAdan,
    MetaLion,
    MetaOptimizer,
    MetaRAdam,
    MetaRMSProp,
    MetaRMSprop,
    MetaSGD,
)
from diffopt.optim.radam import RAdam
from diffopt.optim.rmsprop import RMSProp, RMSprop
from diffopt.optim.sgd import SGD

__all__ = [
    "AdaDelta",
    "AdaGrad",
    "AdaMax",
    "Adadelta",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "Adan",
    "FuncOptimizer",
    "Lion",
    "MetaAdaDelta",
    "MetaAdaGrad",
    "MetaAdaMax",
    "MetaAdadelta",
    "MetaAdagrad",
    "MetaAdam",
    "MetaAdamW",
    "MetaAdamax",
    "MetaAdan",
    "MetaLion",
    "MetaOptimizer",
    "MetaRAdam",
    "MetaRMSProp",
    "MetaRMSprop",
    "MetaSGD",
    "Optimizer",
    "RAdam",
    "RMSProp",
    "RMSprop",
    "SGD",
    "func",
    "meta",
]
