"""The treespec constructors under short names: ``optree_core.treespec.dict(...)`` is
:func:`optree_core.treespec_dict`, and so on.

    >>> import optree_core.treespec as treespec
    >>> treespec.tuple([treespec.leaf(), treespec.none()])
    PyTreeSpec((*, None))
    >>> treespec.dict({'b': treespec.leaf(), 'a': treespec.leaf()})
    PyTreeSpec({'a': *, 'b': *})
"""

from __future__ import annotations

from optree_core.ops import treespec_defaultdict as defaultdict
from optree_core.ops import treespec_deque as deque
from optree_core.ops import treespec_dict as dict
from optree_core.ops import treespec_from_collection as from_collection
from optree_core.ops import treespec_frozendict as frozendict
from optree_core.ops import treespec_leaf as leaf
from optree_core.ops import treespec_list as list
from optree_core.ops import treespec_namedtuple as namedtuple
from optree_core.ops import treespec_none as none
from optree_core.ops import treespec_ordereddict as ordereddict
from optree_core.ops import treespec_structseq as structseq
from optree_core.ops import treespec_tuple as tuple

__all__ = [
    "defaultdict",
    "deque",
    "dict",
    "frozendict",
    "from_collection",
    "leaf",
    "list",
    "namedtuple",
    "none",
    "ordereddict",
    "structseq",
    "tuple",
]
