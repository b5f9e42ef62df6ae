"""``MetaGradientModule``: a module that tells its own parameters from the meta-parameters it uses.

A module built from meta-parameters (tensors that require grad, or modules, passed to its
constructor) keeps them apart from its own parameters: ``parameters()`` yields only the inner
parameters (what an inner optimizer should update), ``meta_parameters()`` the outer ones (what the
meta-gradient is taken with respect to). Implicit-differentiation modules build on this.

Example:
    >>> import torch
    >>> class Inner(MetaGradientModule):
    ...     def __init__(self, meta_w):
    ...         super().__init__()
    ...         self.meta_w = meta_w
    ...         self.w = torch.nn.Parameter(torch.zeros(2))
    >>> meta_w = torch.ones(2, requires_grad=True)
    >>> inner = Inner(meta_w)
    >>> [name for name, _ in inner.named_parameters()]
    ['w']
    >>> [name for name, _ in inner.named_meta_parameters()]
    ['meta_w']
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

import optree_core

__all__ = ["MetaGradientModule", "MetaInputsContainer"]


class MetaInputsContainer:
    """The tensors and modules passed to a :class:`MetaGradientModule`'s constructor.

    :class:`MetaGradientModule` builds one per instance; assigning an attribute checks it to tell
    meta-inputs from the module's own parameters. The parameters of a meta-module count as
    meta-parameters too.

    Args:
        meta_parameters: the tensors (requiring grad) passed to the constructor.
        meta_modules: the modules passed to the constructor.

    Example:
        >>> import torch
        >>> theta, encoder = torch.zeros(2, requires_grad=True), torch.nn.Linear(2, 2)
        >>> container = MetaInputsContainer([theta], [encoder])
        >>> id(theta) in container.meta_parameter_ids, id(encoder.weight) in container.meta_parameter_ids
        (True, True)
        >>> len(container.meta_parameter_ids), len(container.meta_module_ids)
        (3, 1)
    """

    def __init__(self, meta_parameters: list[torch.Tensor], meta_modules: list[nn.Module]):
        self.meta_parameter_ids = {id(t) for t in meta_parameters}
        self.meta_module_ids = {id(m) for m in meta_modules}
        for module in meta_modules:
            self.meta_parameter_ids.update(id(p) for p in module.parameters())


class MetaGradientModule(nn.Module):
    """An :class:`torch.nn.Module` that keeps meta-parameters apart from its own parameters.

    Tensors that require grad and modules found among the constructor's arguments (at any depth
    of nesting in lists, tuples and dicts) are meta-inputs. Assigning one of them as an
    attribute registers it as a meta-parameter or meta-module instead of a parameter or
    submodule; :meth:`register_meta_parameter` and :meth:`register_meta_module` do so explicitly.

    Args:
        *args: the subclass's constructor arguments. Every tensor that requires grad and every
            module among them, at any depth of nesting, is recorded as a meta-input.
        **kwargs: the same, for keyword arguments.

    Example:
        >>> import torch
        >>> class Model(MetaGradientModule):
        ...     def __init__(self, encoder):
        ...         super().__init__()
        ...         self.encoder = encoder
        ...         self.head = torch.nn.Linear(2, 1)
        >>> model = Model(torch.nn.Linear(3, 2))
        >>> len(list(model.parameters())), len(list(model.meta_parameters()))
        (2, 2)
    """

    _meta_inputs: MetaInputsContainer
    _meta_parameters: dict[str, torch.Tensor | None]
    _meta_modules: dict[str, nn.Module | None]

    def __new__(cls, *args: Any, **kwargs: Any) -> MetaGradientModule:
        instance = super().__new__(cls)
        leaves = optree_core.tree_leaves((args, kwargs))
        tensors = [x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad]
        modules = [x for x in leaves if isinstance(x, nn.Module)]
        object.__setattr__(instance, "_meta_inputs", MetaInputsContainer(tensors, modules))
        object.__setattr__(instance, "_meta_parameters", OrderedDict())
        object.__setattr__(instance, "_meta_modules", OrderedDict())
        return instance

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        del args, kwargs
        super().__init__()

    def __getattr__(self, name: str) -> Any:
        meta_parameters = self.__dict__.get("_meta_parameters")
        if meta_parameters is not None and name in meta_parameters:
            return meta_parameters[name]
        meta_modules = self.__dict__.get("_meta_modules")
        if meta_modules is not None and name in meta_modules:
            return meta_modules[name]
        return super().__getattr__(name)

    def __setattr__(self, name: str, value: Any) -> None:
        meta_inputs = self.__dict__.get("_meta_inputs")
        if meta_inputs is None:  # before __new__ finished: plain nn.Module behaviour
            super().__setattr__(name, value)
            return
        if isinstance(value, torch.Tensor) and value.requires_grad:
            # A tensor that requires grad is always trainable state: a meta-parameter when it
            # came in through the constructor, else one of this module's own parameters (even a
            # plain tensor, not only an nn.Parameter, as an inner solver's iterates often are).
            if "_parameters" not in self.__dict__:
                raise AttributeError(
                    f"cannot assign parameter {name!r} before Module.__init__() call: call "
                    "super().__init__() first"
                )
            self._forget(name)
            if id(value) in meta_inputs.meta_parameter_ids:
                self.register_meta_parameter(name, value)
            else:
                self.register_parameter(name, value)
            return
        if isinstance(value, nn.Module) and id(value) in meta_inputs.meta_module_ids:
            if "_modules" not in self.__dict__:
                raise AttributeError(
                    f"cannot assign module {name!r} before Module.__init__() call: call "
                    "super().__init__() first"
                )
            self._forget(name)
            self.register_meta_module(name, value)
            return
        for table, kind, expected, what in (
            (self._meta_parameters, "meta-parameter", torch.Tensor, "a tensor"),
            (self._meta_modules, "meta-module", nn.Module, "a module"),
        ):
            if name in table:
                if value is not None and not isinstance(value, expected):
                    raise TypeError(f"cannot assign {type(value).__name__} to {kind} {name!r} "
                                    f"({what} or None is required)")
                table[name] = value
                return
        if isinstance(value, nn.Module):
            self._forget(name)  # a module replaces a meta-module or parameter of the same name
        super().__setattr__(name, value)

    def _forget(self, name: str) -> None:
        """Drop ``name`` from every slot, so that it can be registered anew in another one."""
        self.__dict__.pop(name, None)
        for table in ("_parameters", "_buffers", "_modules", "_meta_parameters", "_meta_modules"):
            self.__dict__.get(table, {}).pop(name, None)
        self.__dict__.get("_non_persistent_buffers_set", set()).discard(name)

    def __delattr__(self, name: str) -> None:
        if name in self._meta_parameters:
            del self._meta_parameters[name]
        elif name in self._meta_modules:
            del self._meta_modules[name]
        else:
            super().__delattr__(name)

    def _check_registration(self, table: str, kind: str, name: Any, value: Any,
                            expected: type) -> None:
        """The checks every register_* method makes: set-up done, a free valid name, a type."""
        if table not in self.__dict__:
            raise AttributeError(f"cannot register a {kind} before __init__() is called")
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string, got {type(name).__name__}")
        if not name or "." in name:
            raise KeyError(f"invalid {kind} name {name!r}: it must be non-empty without '.'")
        if hasattr(self, name) and name not in self.__dict__[table]:
            raise KeyError(f"attribute {name!r} already exists")
        if value is not None and not isinstance(value, expected):
            raise TypeError(f"{kind} {name!r} must be a {expected.__name__} or None, got "
                            f"{type(value).__name__}")

    def register_parameter(self, name: str, param: torch.Tensor | None) -> None:
        """Register ``param`` as one of this module's own (inner) parameters.

        Unlike :meth:`torch.nn.Module.register_parameter`, any tensor that requires grad is
        accepted (not only an :class:`torch.nn.Parameter`); a meta-input of the constructor is
        refused, since it belongs in :meth:`register_meta_parameter`.

        Args:
            name: the attribute name (non-empty, without '.').
            param: a tensor that requires grad, or None.

        Example:
            >>> import torch
            >>> m = MetaGradientModule()
            >>> m.register_parameter('w', torch.zeros(2, requires_grad=True))
            >>> [name for name, _ in m.named_parameters()]
            ['w']
        """
        self._check_registration("_parameters", "parameter", name, param, torch.Tensor)
        if param is not None:
            if not (param.requires_grad or isinstance(param, nn.Parameter)):  # frozen: allowed
                raise ValueError(f"parameter {name!r} must require grad (or be an nn.Parameter)")
            if id(param) in self._meta_inputs.meta_parameter_ids:
                raise ValueError(
                    f"parameter {name!r} was passed to the constructor, so it is a "
                    "meta-parameter: register it with register_meta_parameter()"
                )
        self._parameters[name] = param

    def register_meta_parameter(self, name: str, param: torch.Tensor | None) -> None:
        """Register ``param`` as a meta-parameter (not yielded by ``parameters()``).

        Args:
            name: the attribute name (non-empty, without '.').
            param: a tensor that requires grad, or None.

        Example:
            >>> import torch
            >>> m = MetaGradientModule()
            >>> m.register_meta_parameter('lr', torch.tensor(0.1, requires_grad=True))
            >>> list(m.meta_parameters())
            [tensor(0.1000, requires_grad=True)]
        """
        self._check_registration("_meta_parameters", "meta-parameter", name, param, torch.Tensor)
        if param is not None and not param.requires_grad:
            raise ValueError(f"meta-parameter {name!r} must require grad")
        self._meta_parameters[name] = param

    def add_meta_module(self, name: str, meta_module: nn.Module | None) -> None:
        """Register ``meta_module``: its parameters become meta-parameters of this module.

        Args:
            name: the attribute name (non-empty, without '.').
            meta_module: an :class:`torch.nn.Module`, or None.

        Example:
            >>> import torch
            >>> m = MetaGradientModule()
            >>> m.add_meta_module('encoder', torch.nn.Linear(2, 1))
            >>> len(list(m.meta_parameters())), len(list(m.parameters()))
            (2, 0)
        """
        self._check_registration("_meta_modules", "meta-module", name, meta_module, nn.Module)
        self._meta_modules[name] = meta_module

    register_meta_module = add_meta_module

    def add_module(self, name: str, module: nn.Module | None) -> None:
        """Add a submodule, or a meta-module if ``module`` was a constructor argument."""
        if module is not None and id(module) in self._meta_inputs.meta_module_ids:
            self.register_meta_module(name, module)
        else:
            super().add_module(name, module)

    register_module = add_module

    def named_meta_parameters(self, prefix: str = "",
                              recurse: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield ``(name, tensor)`` for every meta-parameter, without duplicates."""
        seen: set[int] = set()
        prefix = prefix + "." if prefix else ""
        for name, param in self._meta_parameters.items():
            if param is not None and id(param) not in seen:
                seen.add(id(param))
                yield prefix + name, param
        for name, module in self._meta_modules.items():
            if module is None:
                continue
            for sub_name, param in module.named_parameters(prefix=prefix + name):
                if id(param) not in seen:
                    seen.add(id(param))
                    yield sub_name, param
        if recurse:
            for name, child in self.named_children():
                if isinstance(child, MetaGradientModule):
                    for sub_name, param in child.named_meta_parameters(prefix=prefix + name):
                        if id(param) not in seen:
                            seen.add(id(param))
                            yield sub_name, param

    def meta_parameters(self, recurse: bool = True) -> Iterator[torch.Tensor]:
        """Yield every meta-parameter."""
        for _, param in self.named_meta_parameters(recurse=recurse):
            yield param

    def named_meta_children(self) -> Iterator[tuple[str, nn.Module]]:
        """Yield ``(name, module)`` for the registered meta-modules."""
        seen: set[int] = set()
        for name, module in self._meta_modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def meta_children(self) -> Iterator[nn.Module]:
        """Yield the registered meta-modules."""
        for _, module in self.named_meta_children():
            yield module

    def named_meta_modules(self, prefix: str = "") -> Iterator[tuple[str, nn.Module]]:
        """Yield ``(name, module)`` for all meta-modules and their submodules."""
        prefix = prefix + "." if prefix else ""
        for name, module in self.named_meta_children():
            yield from module.named_modules(prefix=prefix + name)

    def meta_modules(self) -> Iterator[nn.Module]:
        """Yield all meta-modules and their submodules."""
        for _, module in self.named_meta_modules():
            yield module
