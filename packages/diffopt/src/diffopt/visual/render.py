"""Rendering through Graphviz's ``dot``, with an error that says how to install it.

:func:`~diffopt.visual.make_dot` returns a :class:`graphviz.Digraph` subclass whose ``render``,
``pipe`` and ``view`` turn graphviz's terse ``ExecutableNotFound`` into
:class:`GraphvizNotFoundError`, which names the package to install. Building the graph (and
reading its DOT text, ``graph.source``) never needs ``dot``.

Example:
    >>> isinstance(dot_available(), bool)
    True
"""

from __future__ import annotations

import contextlib
import functools
import shutil
from typing import Any

__all__ = ["GraphvizNotFoundError", "digraph_class", "dot_available", "import_graphviz"]

_INSTALL_DOT = (
    "rendering the graph needs Graphviz's `dot` executable, which was not found on PATH. "
    "Install Graphviz (Debian/Ubuntu: `sudo apt-get install graphviz`; Fedora: "
    "`sudo dnf install graphviz`; macOS: `brew install graphviz`; conda: "
    "`conda install -c conda-forge graphviz`). Building the graph does not need it: "
    "`graph.source` is its DOT text."
)

_INSTALL_PY = (
    "diffopt.visual needs the `graphviz` Python package (pip install 'graphviz>=0.20'); "
    "rendering also needs Graphviz's `dot` executable (Debian/Ubuntu: "
    "`sudo apt-get install graphviz`)"
)


def import_graphviz() -> Any:
    """The ``graphviz`` module, or an :class:`ImportError` that says how to install it.

    Returns:
        The imported :mod:`graphviz` module.

    Raises:
        ImportError: if the ``graphviz`` Python package is not installed; the message gives the
            ``pip install`` command.

    Example:
        >>> graphviz = import_graphviz()
        >>> graphviz.__name__, hasattr(graphviz, 'Digraph')
        ('graphviz', True)
    """
    try:
        import graphviz
    except ImportError as error:
        raise ImportError(_INSTALL_PY) from error
    return graphviz


def dot_available() -> bool:
    """Whether Graphviz's ``dot`` executable is on ``PATH`` (needed to render, not to build).

    Returns:
        ``True`` if ``dot`` can be found on ``PATH``.

    Example:
        >>> import shutil
        >>> dot_available() == (shutil.which('dot') is not None)
        True
    """
    return shutil.which("dot") is not None


try:  # graphviz is optional for importing diffopt; make_dot asks for it when called
    import graphviz as _graphviz

    _NotFoundBase: type = _graphviz.ExecutableNotFound
except ImportError:  # pragma: no cover - exercised only without the graphviz package
    _graphviz = None
    _NotFoundBase = RuntimeError


class GraphvizNotFoundError(_NotFoundBase):
    """Graphviz's ``dot`` is missing: a :class:`graphviz.ExecutableNotFound` (hence a :class:`RuntimeError`).

    Raised by ``render``, ``pipe`` and ``view`` of the graphs :func:`~diffopt.visual.make_dot`
    builds; its default message says how to install Graphviz on common systems.

    Args:
        message: the error text (default: installation instructions).

    Example:
        >>> error = GraphvizNotFoundError()
        >>> isinstance(error, RuntimeError), 'apt-get install graphviz' in str(error)
        (True, True)
    """

    def __init__(self, message: str = _INSTALL_DOT) -> None:
        RuntimeError.__init__(self, message)  # graphviz's own __init__ formats another text


@contextlib.contextmanager
def _dot_required():
    graphviz = import_graphviz()
    try:
        yield
    except graphviz.ExecutableNotFound as error:
        if isinstance(error, GraphvizNotFoundError):
            raise
        raise GraphvizNotFoundError() from error


@functools.cache
def digraph_class() -> type:
    """The :class:`graphviz.Digraph` subclass :func:`~diffopt.visual.make_dot` returns.

    Its ``render``, ``pipe`` and ``view`` raise :class:`GraphvizNotFoundError` (with install
    instructions) when ``dot`` is missing; building a graph and reading ``.source`` never need ``dot``.

    Returns:
        The class (created once, then cached).

    Example:
        >>> Graph = digraph_class()
        >>> graph = Graph()
        >>> graph.edge('loss', 'w')
        >>> issubclass(Graph, import_graphviz().Digraph), 'loss -> w' in graph.source
        (True, True)
    """
    graphviz = import_graphviz()

    class GradientGraph(graphviz.Digraph):
        """A :class:`graphviz.Digraph` whose rendering explains how to install a missing ``dot``."""

        def render(self, *args: Any, **kwargs: Any) -> Any:
            with _dot_required():
                return super().render(*args, **kwargs)

        def pipe(self, *args: Any, **kwargs: Any) -> Any:
            with _dot_required():
                return super().pipe(*args, **kwargs)

        def view(self, *args: Any, **kwargs: Any) -> Any:
            with _dot_required():
                return super().view(*args, **kwargs)

    GradientGraph.__module__ = "diffopt.visual"
    return GradientGraph
