"""Differentiable meta-optimizers (``MetaSGD``, ``MetaAdam``...) over a module's parameters.

Example:
    >>> import diffopt
    >>> diffopt.optim.meta.MetaAdam is diffopt.MetaAdam
    True
"""

from diffopt.optim.meta.adadelta import MetaAdaDelta, MetaAdadelta
from diffopt.optim.meta.adafactor import MetaAdafactor
from diffopt.optim.meta.adagrad import MetaAdaGrad, MetaAdagrad
from diffopt.optim.meta.adam import MetaAdam
from diffopt.optim.meta.adamax import MetaAdaMax, MetaAdamax
from diffopt.optim.meta.adamw import MetaAdamW
from diffopt.optim.meta.adan import MetaAdan
from diffopt.optim.meta.asgd import MetaASGD
from diffopt.optim.meta.base import MetaOptimizer
from diffopt.optim.meta.lion import MetaLion
from diffopt.optim.meta.muon import MetaMuon
from diffopt.optim.meta.nadam import MetaNAdam
from diffopt.optim.meta.radam import MetaRAdam
from diffopt.optim.meta.rmsprop import MetaRMSProp, MetaRMSprop
from diffopt.optim.meta.rprop import MetaRprop
from diffopt.optim.meta.sgd import MetaSGD

__all__ = [
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
]
