"""Drop-in replacements for ``torch.optim`` optimizers, backed by the fused kernels.

What every class here shares with its ``torch.optim`` twin: the constructor, defaults and argument
checks, param groups, state keys and ``state_dict()`` layout, so checkpoints move between the two
in both directions. Arguments common to all:

* ``params``: the parameters to optimize, an iterable of tensors or of parameter-group dicts;
* ``lr``: the learning rate (a float, or a tensor as torch allows);
* ``maximize``: whether to maximize the objective instead of minimizing it;
* ``foreach``, ``fused``: accepted for torch compatibility and ignored (the step is always the
  fused kernel);
* ``capturable`` (the classes whose torch.optim twin has it, and Lion, Adan and Adafactor): as in torch.optim,
  each parameter's ``state["step"]`` (and NAdam's ``mu_product``; ASGD's ``eta`` and ``mu`` are
  there anyway) is a tensor on the parameter's device, which the fused kernel reads, uses for the
  bias corrections and advances there, so that a step reads nothing on the host and a CUDA graph
  may capture it (each replay is one step). Without it, a step during CUDA-graph capture raises.
  On CPU parameters the kernels take the same path (so CPU tests check it). A ``capturable``
  group whose ``lr`` (or another hyper-parameter) is a tensor on a GPU runs torch's own
  implementation, as the fused kernels take hyper-parameters as numbers;
* ``differentiable``: a torch.optim feature a fused kernel cannot offer; groups with
  ``differentiable=True`` or a learning rate that requires grad run torch's own implementation.

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
