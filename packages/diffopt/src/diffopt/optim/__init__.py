"""PyTorch-style optimizers, differentiable meta-optimizers and the functional wrapper.

Example:
    >>> import diffopt
    >>> diffopt.optim.Adam is diffopt.Adam
    True
"""

from diffopt.optim import func, meta
from diffopt.optim.adadelta import AdaDelta, Adadelta
from diffopt.optim.adafactor import Adafactor
from diffopt.optim.adagrad import AdaGrad, Adagrad
from diffopt.optim.adam import Adam
from diffopt.optim.adamax import AdaMax, Adamax
from diffopt.optim.adamw import AdamW
from diffopt.optim.adan import Adan
from diffopt.optim.asgd import ASGD
from diffopt.optim.base import Optimizer
from diffopt.optim.func import FuncOptimizer
from diffopt.optim.lion import Lion
from diffopt.optim.meta import (
    MetaAdaDelta,
    MetaAdadelta,
    MetaAdafactor,
    MetaAdaGrad,
    MetaAdagrad,
    MetaAdam,
    MetaAdaMax,
    MetaAdamax,
    MetaAdamW,
    MetaAdan,
    MetaASGD,
    MetaLion,
    MetaMuon,
    MetaNAdam,
    MetaOptimizer,
    MetaRAdam,
    MetaRMSProp,
    MetaRMSprop,
    MetaRprop,
    MetaSGD,
)
from diffopt.optim.muon import Muon
from diffopt.optim.nadam import NAdam
from diffopt.optim.radam import RAdam
from diffopt.optim.rmsprop import RMSProp, RMSprop
from diffopt.optim.rprop import Rprop
from diffopt.optim.sgd import SGD

__all__ = [
    "ASGD",
    "AdaDelta",
    "AdaGrad",
    "AdaMax",
    "Adadelta",
    "Adafactor",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "Adan",
    "FuncOptimizer",
    "Lion",
    "MetaASGD",
    "MetaAdaDelta",
    "MetaAdaGrad",
    "MetaAdaMax",
    "MetaAdadelta",
    "MetaAdafactor",
    "MetaAdagrad",
    "MetaAdam",
    "MetaAdamW",
    "MetaAdamax",
    "MetaAdan",
    "MetaLion",
    "MetaMuon",
    "MetaNAdam",
    "MetaOptimizer",
    "MetaRAdam",
    "MetaRMSProp",
    "MetaRMSprop",
    "MetaRprop",
    "MetaSGD",
    "Muon",
    "NAdam",
    "Optimizer",
    "RAdam",
    "RMSProp",
    "RMSprop",
    "Rprop",
    "SGD",
    "func",
    "meta",
]
