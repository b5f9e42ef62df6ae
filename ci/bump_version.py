#!/usr/bin/env python3
"""Bump one package's version: its version.py (the only place the version is written) and a new
heading at the top of its CHANGELOG.md.

    python ci/bump_version.py optree-core 0.2.0
    python ci/bump_version.py diffopt patch        # 0.1.0 -> 0.1.1 (also: minor, major)
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMPORT_NAMES = {"optree-core": "optree_core", "fused-optim": "fused_optim", "diffopt": "diffopt"}
VERSION_RE = re.compile(r'^__version__ = "(\d+)\.(\d+)\.(\d+)"$', re.M)


def next_version(current: tuple[int, int, int], spec: str) -> str:
    major, minor, patch = current
    if spec == "major":
        return f"{major + 1}.0.0"
    if spec == "minor":
        return f"{major}.{minor + 1}.0"
    if spec == "patch":
        return f"{major}.{minor}.{patch + 1}"
    if not re.fullmatch(r"\d+\.\d+\.\d+", spec):
        raise SystemExit(f"version must be X.Y.Z or major/minor/patch, got {spec!r}")
    if tuple(int(x) for x in spec.split(".")) <= current:
        raise SystemExit(f"{spec} is not newer than {'.'.join(map(str, current))}")
    return spec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package", choices=sorted(IMPORT_NAMES))
    parser.add_argument("version", help="X.Y.Z, or major / minor / patch")
    args = parser.parse_args(argv)
    pkg_dir = ROOT / "packages" / args.package
    version_file = pkg_dir / "src" / IMPORT_NAMES[args.package] / "version.py"
    text = version_file.read_text()
    match = VERSION_RE.search(text)
    if match is None:
        raise SystemExit(f"no __version__ = \"X.Y.Z\" line in {version_file}")
    current = tuple(int(g) for g in match.groups())
    new = next_version(current, args.version)  # type: ignore[arg-type]
    version_file.write_text(VERSION_RE.sub(f'__version__ = "{new}"', text, count=1))
    changelog = pkg_dir / "CHANGELOG.md"
    lines = changelog.read_text().splitlines(keepends=True) if changelog.exists() else ["\n"]
    heading = f"## {new} ({datetime.date.today().isoformat()})\n\n- \n\n"
    # Insert after the title line.
    insert_at = 1 if lines and lines[0].startswith("# ") else 0
    lines[insert_at:insert_at] = ["\n", heading] if insert_at else [heading]
    changelog.write_text("".join(lines))
    print(f"{args.package}: {'.'.join(map(str, current))} -> {new} "
          f"(tag: {args.package}-v{new}); edit the CHANGELOG entry")
    return 0


if __name__ == "__main__":
    sys.exit(main())
