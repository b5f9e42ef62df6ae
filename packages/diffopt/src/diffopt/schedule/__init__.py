"""Learning-rate schedules: functions of the step count, usable wherever an ``lr`` is taken.

Example:
    >>> import diffopt
    >>> tx = diffopt.sgd(lr=diffopt.schedule.linear_schedule(0.1, 0.0, transition_steps=10))
    >>> isinstance(tx, diffopt.GradientTransformation), type(tx).__name__
    (True, 'ChainedGradientTransformation')
"""

from diffopt.schedule.exponential_decay import exponential_decay
from diffopt.schedule.inject import InjectHyperparamsState, inject_hyperparams
from diffopt.schedule.polynomial import linear_schedule, polynomial_schedule

__all__ = [
    "InjectHyperparamsState",
    "exponential_decay",
    "inject_hyperparams",
    "linear_schedule",
    "polynomial_schedule",
]
