"""The former home of :mod:`optree_core.integrations.numpy`, kept so old imports work."""

from optree_core.integrations.numpy import *  # noqa: F403
