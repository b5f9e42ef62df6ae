"""Drop-in replacements for ``torch.optim`` optimizers, backed by the fused kernels."""

from fused_optim.optim.adadelta import Adadelta
from fused_optim.optim.adagrad import Adagrad
from fused_optim.optim.adam import Adam
from fused_optim.optim.adamax import Adamax
from fused_optim.optim.adamw import AdamW
from fused_optim.optim.radam import RAdam
from fused_optim.optim.rmsprop import RMSprop
from fused_optim.optim.sgd import SGD

__all__ = ["SGD", "Adadelta", "Adagrad", "Adam", "AdamW", "Adamax", "RAdam", "RMSprop"]
