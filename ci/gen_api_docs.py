#!/usr/bin/env python3
"""Generate the API reference of each package from its docstrings: docs/api/<dist-name>.md.

    .venv/bin/python ci/gen_api_docs.py            # (re)write docs/api/*.md
    .venv/bin/python ci/gen_api_docs.py --check    # exit 1 if any file would change

Each public name (the package's ``__all__``) gets its signature and its docstring. Run it after
changing a docstring; ci/tests/test_api_docs.py fails when the committed pages are stale.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"optree-core": "optree_core", "fused-optim": "fused_optim", "diffopt": "diffopt"}


def _signature(obj: object) -> str:
    try:
        text = str(inspect.signature(obj))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""
    # Sentinel defaults print with their address; keep the pages reproducible.
    return re.sub(r"<([\w.]+) object at 0x[0-9a-f]+>", r"<\1>", text)


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


def render(dist: str, module_name: str) -> str:
    module = importlib.import_module(module_name)
    names = list(getattr(module, "__all__", []))
    lines = [
        f"# {dist} API reference",
        "",
        f"Generated from the docstrings of `{module_name}` {getattr(module, '__version__', '')} "
        "by `ci/gen_api_docs.py`; do not edit by hand.",
        "",
        inspect.cleandoc(module.__doc__ or "").split("\n\n")[0],
        "",
    ]
    for name in names:
        obj = getattr(module, name, None)
        kind = _kind(obj)
        if kind == "module":
            summary = inspect.cleandoc(obj.__doc__ or "").split("\n\n")[0]  # type: ignore[union-attr]
            lines += [f"## `{module_name}.{name}` (module)", "", summary or "(no docstring)", ""]
            continue
        if kind == "alias":
            lines += [f"## `{name}` (type alias)", "", f"`{obj!r}`", ""]
            continue
        if kind == "constant":
            lines += [f"## `{name}`", "", f"Constant: `{obj!r}`", ""]
            continue
        lines += [f"## `{name}{_signature(obj)}` ({kind})", ""]
        doc = inspect.getdoc(obj)
        lines += [doc if doc else "(no docstring)", ""]
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
