"""Ready-made functional optimizers: chains of :mod:`diffopt.transform` transformations.

Example:
    >>> import diffopt
    >>> sorted(n for n in __all__)[:3]
    ['adadelta', 'adafactor', 'adagrad']
"""

from diffopt.alias.adadelta import adadelta
from diffopt.alias.adafactor import adafactor
from diffopt.alias.adagrad import adagrad
from diffopt.alias.adam import adam
from diffopt.alias.adamax import adamax
from diffopt.alias.adamw import adamw
from diffopt.alias.adan import adan
from diffopt.alias.asgd import asgd
from diffopt.alias.lion import lion
from diffopt.alias.muon import muon
from diffopt.alias.nadam import nadam
from diffopt.alias.radam import radam
from diffopt.alias.rmsprop import rmsprop
from diffopt.alias.rprop import rprop
from diffopt.alias.sgd import sgd

__all__ = ["adadelta", "adafactor", "adagrad", "adam", "adamax", "adamw", "asgd", "muon", "nadam", "radam", "rmsprop", "rprop", "sgd"]
__all__ += ["adan", "lion"]  # the research optimizers torch.optim lacks
