"""Drop-in replacements for ``torch.optim`` optimizers, backed by the fused kernels.

What every class here shares with its ``torch.optim`` twin: the constructor, defaults and argument
checks, param groups, state keys and ``state_dict()`` layout, so checkpoints move between the two
in both directions. Arguments common to all:

* ``params``: the parameters to optimize, an iterable of tensors or of parameter-group dicts;
* ``lr``: the learning rate (a float, or a tensor as torch allows);
* ``maximize``: whether to maximize the objective instead of minimizing it;
* ``foreach``, ``fused``: accepted for torch compatibility and ignored (the step is always the
  fused kernel);
* ``differentiable``, ``capturable``: torch.optim features a fused kernel cannot offer; groups
  with ``differentiable=True``, a learning rate that requires grad, or ``capturable=True`` and
  CUDA parameters run torch's own implementation (capturable changes nothing for CPU parameters).

Each class documents its own hyper-parameters; one step routine serves them all
(``fused_optim.optim._common.FusedStep``).
"""

from fused_optim.optim.adadelta import Adadelta
from fused_optim.optim.adafactor import Adafactor
from fused_optim.optim.adagrad import Adagrad
from fused_optim.optim.adam import Adam
from fused_optim.optim.adamax import Adamax
from fused_optim.optim.adamw import AdamW
from fused_optim.optim.adan import Adan
from fused_optim.optim.asgd import ASGD
from fused_optim.optim.lion import Lion
from fused_optim.optim.muon import Muon
from fused_optim.optim.nadam import NAdam
from fused_optim.optim.radam import RAdam
from fused_optim.optim.rmsprop import RMSprop
from fused_optim.optim.rprop import Rprop
from fused_optim.optim.sgd import SGD

__all__ = ["ASGD", "SGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "Muon", "NAdam", "RAdam", "RMSprop", "Rprop"]
__all__ += ["Adan", "Lion"]  # the research optimizers torch.optim lacks
