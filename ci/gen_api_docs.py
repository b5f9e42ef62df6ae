#!/usr/bin/env python3
"""Generate the API reference of each package from its docstrings: docs/api/<dist-name>.md.

    .venv/bin/python ci/gen_api_docs.py            # (re)write docs/api/*.md
    .venv/bin/python ci/gen_api_docs.py --check    # exit 1 if any file would change

A page covers the package and every public submodule a user reaches through ``__all__`` (a
module object listed in a public module's ``__all__``, recursively), plus any other public module
whose ``__all__`` adds a name those do not export; ``_private`` modules never.
Each public name gets its signature and its docstring once, where it is first met (the package
before its submodules; under its own ``__name__`` before an alias such as ``PyTreeDef``); later
appearances, and names re-exported from another project (``dataclasses.fields``), get a one-line
note saying where they are documented. Run it after changing a docstring;
ci/tests/test_api_docs.py fails when the committed pages are stale.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"optree-core": "optree_core", "fused-optim": "fused_optim", "diffopt": "diffopt"}


class Entry(NamedTuple):
    """One public name of one module, and where it is documented if not here."""

    module: str
    name: str
    obj: object
    see: str | None = None  # "`pkg.name`" (documented there) or "re-export of `x.y`"

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"


def _stable(text: str) -> str:
    """Drop the addresses in reprs (``<function f at 0x7f..>``): keep the pages reproducible."""
    return re.sub(r" at 0x[0-9a-f]+>", ">", text)


def _signature(obj: object) -> str:
    try:
        return _stable(str(inspect.signature(obj)))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""


def _constant_text(obj: object, name: str = "") -> str:
    """A constant's value; a long table is summarized by its keys, as is a build's description
    (``BUILD_INFO``, whose values differ between builds: the page must not depend on the build)."""
    text = _stable(repr(obj))
    if len(text) <= 300 and name != "BUILD_INFO":
        return f"Constant: `{text}`"
    if isinstance(obj, dict):
        keys = ", ".join(f"`{key}`" for key in obj)
        return f"Constant: a `dict` with keys {keys}."
    return f"Constant: `{text[:300]}...`"


def _kind(obj: object) -> str:
    if getattr(obj, "__origin__", None) is not None:
        return "alias"
    if inspect.isclass(obj):
        return "class"
    if inspect.ismodule(obj):
        return "module"
    if callable(obj):
        return "function"
    return "constant"


def _summary(module: ModuleType) -> str:
    return inspect.cleandoc(module.__doc__ or "").split("\n\n")[0]


def _is_public_module(obj: object, package: str) -> bool:
    if not inspect.ismodule(obj):
        return False
    parts = obj.__name__.split(".")
    return parts[0] == package and not any(part.startswith("_") for part in parts)


def _reachable_modules(package: str) -> list[str]:
    """The package, then the public modules reachable through ``__all__``, breadth first."""
    order, queue = [], [package]
    while queue:
        name = queue.pop(0)
        if name in order:
            continue
        order.append(name)
        module = importlib.import_module(name)
        found = {obj.__name__ for obj in _exports(module).values()
                 if _is_public_module(obj, package)}
        queue += sorted(found)
    return order


def _other_public_modules(package: str, known: list[str]) -> list[str]:
    root = importlib.import_module(package)
    path = getattr(root, "__path__", [])  # a plain module has no submodules
    names = [info.name for info in pkgutil.walk_packages(path, package + ".")]
    return [name for name in sorted(names)
            if name not in known and not any(p.startswith("_") for p in name.split("."))]


def public_modules(package: str) -> list[str]:
    """The modules a page has a section for: those reachable through ``__all__``, then any
    other public module whose ``__all__`` exports a name none of those does (else that name
    would be on no page)."""
    modules = _reachable_modules(package)
    seen = {_identity(name, obj) for module in modules
            for name, obj in _exports(importlib.import_module(module)).items()}
    for name in _other_public_modules(package, modules):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] == package:
                raise
            continue  # a helper for an optional library not installed here (optree_core's jax)
        exports = _exports(module)
        new = {_identity(n, obj) for n, obj in exports.items() if not inspect.ismodule(obj)}
        if new - seen:
            modules.append(name)
            seen |= new
    return modules


def _exports(module: ModuleType) -> dict[str, object]:
    """``__all__`` in its own order, names bound to ``None`` (a missing attribute) included."""
    return {name: getattr(module, name, None) for name in getattr(module, "__all__", [])}


def _origin(obj: object, package: str) -> str | None:
    """Where a name re-exported from another project is defined; None for the package's own."""
    if _kind(obj) == "alias":
        return None  # typing aliases report `typing` as their module whoever defines them
    if inspect.isclass(obj) or inspect.isroutine(obj):
        module, name = getattr(obj, "__module__", None) or "", obj.__qualname__  # type: ignore[attr-defined]
    else:
        module, name = type(obj).__module__, type(obj).__qualname__
        if module == "builtins":
            return None  # plain constants (numbers, strings, dicts) belong to whoever binds them
    if module.split(".")[0] == package:
        return None
    return f"{module}.{name}"


def _identity(name: str, obj: object) -> object:
    # Equal small constants are often one object (False, 0): tell them apart by name.
    return ("constant", name, repr(obj)) if _kind(obj) == "constant" else id(obj)


def _homes(appearances: list[tuple[str, str, object]]) -> dict[object, tuple[str, str]]:
    """For each object, the (module, name) that documents it: its first module, and there the
    name it was defined under if it is exported under several."""
    homes: dict[object, tuple[str, str]] = {}
    for module, name, obj in appearances:
        key = _identity(name, obj)
        home = homes.get(key)
        if home is None or (home[0] == module and name == getattr(obj, "__name__", None)):
            homes[key] = (module, name)
    return homes


def catalog(package: str) -> list[Entry]:
    """Every public non-module name of every public module, in page order."""
    appearances = [(module, name, obj) for module in public_modules(package)
                   for name, obj in _exports(importlib.import_module(module)).items()
                   if not inspect.ismodule(obj)]
    homes = _homes(appearances)
    entries = []
    for module, name, obj in appearances:
        origin = _origin(obj, package)
        home = homes[_identity(name, obj)]
        if origin is not None:
            see = f"re-export of `{origin}`"
        elif home != (module, name):
            see = f"`{home[0]}.{home[1]}`"
        else:
            see = None
        entries.append(Entry(module, name, obj, see))
    return entries


def documented_entries(package: str) -> list[Entry]:
    """The entries a page documents in full (the ones whose docstrings are the package's)."""
    return [entry for entry in catalog(package) if entry.see is None]


def _render_entry(entry: Entry, heading: str) -> list[str]:
    obj, kind = entry.obj, _kind(entry.obj)
    if kind == "alias":
        return [f"{heading} `{entry.name}` (type alias)", "", f"`{_stable(repr(obj))}`", ""]
    if kind == "constant":
        return [f"{heading} `{entry.name}`", "", _constant_text(obj, entry.name), ""]
    doc = inspect.getdoc(obj)
    return [f"{heading} `{entry.name}{_signature(obj)}` ({kind})", "",
            doc if doc else "(no docstring)", ""]


def _render_notes(entries: list[Entry]) -> list[str]:
    if not entries:
        return []
    lines = ["Also exported here:", ""]
    for entry in entries:
        note = entry.see if entry.see.startswith("re-export") else f"documented as {entry.see}"
        lines.append(f"- `{entry.name}`: {note}")
    return [*lines, ""]


def _render_module(name: str, entries: list[Entry], package: str, heading: str) -> list[str]:
    module = importlib.import_module(name)
    lines = [f"{heading} `{name}`", "", _summary(module) or "(no docstring)", ""]
    submodules = [obj.__name__ for obj in _exports(module).values()
                  if _is_public_module(obj, package)]
    if submodules:
        lines += ["Submodules: " + ", ".join(f"`{sub}`" for sub in submodules), ""]
    for entry in entries:
        if entry.see is None:
            lines += _render_entry(entry, heading + "#")
    return lines + _render_notes([entry for entry in entries if entry.see is not None])


def render(dist: str, module_name: str) -> str:
    package = importlib.import_module(module_name)
    lines = [
        f"# {dist} API reference",
        "",
        f"Generated from the docstrings of `{module_name}` {getattr(package, '__version__', '')} "
        "by `ci/gen_api_docs.py`; do not edit by hand.",
        "",
    ]
    entries = catalog(module_name)
    for name in public_modules(module_name):
        lines += _render_module(name, [e for e in entries if e.module == name], module_name, "##")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if a page is stale")
    args = parser.parse_args(argv)
    out_dir = ROOT / "docs" / "api"
    out_dir.mkdir(parents=True, exist_ok=True)
    stale = []
    for dist, module_name in PACKAGES.items():
        try:
            text = render(dist, module_name)
        except ImportError as exc:
            print(f"skip {dist}: {exc}", file=sys.stderr)
            continue
        page = out_dir / f"{dist}.md"
        if page.exists() and page.read_text() == text:
            continue
        stale.append(page)
        if not args.check:
            page.write_text(text)
    if args.check and stale:
        print("stale API pages: " + ", ".join(str(p.relative_to(ROOT)) for p in stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
