"""noxfile's peer venvs see the main venv's packages, editable installs included.

The compat, typecheck and benchmarks sessions install only peers in their own virtualenv and
reach our stack through a ``.pth`` file pointing at ``.venv``'s site-packages. An editable
install is itself only a ``.pth`` file there, so the pointer must make Python process that
folder's ``.pth`` files, not just put it on ``sys.path``.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("nox")

ROOT = Path(__file__).resolve().parents[2]


def _noxfile():
    spec = importlib.util.spec_from_file_location("noxfile_under_test", ROOT / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Session:
    """The one call _see_main_venv makes: ask the session's python for its purelib folder."""

    def __init__(self, purelib: Path) -> None:
        self.purelib = purelib

    def run(self, *args, **kwargs) -> str:
        return f"{self.purelib}\n"


def test_main_venv_pth_files_run_in_the_session_venv(tmp_path, monkeypatch):
    # A stand-in main venv whose package is installed "editable": only a .pth file names its src.
    src = tmp_path / "src"
    src.mkdir()
    (src / "stack_probe_pkg.py").write_text("ANSWER = 42\n")
    main_site = tmp_path / "main" / "lib" / "python3.11" / "site-packages"
    main_site.mkdir(parents=True)
    (main_site / "_editable_probe.pth").write_text(f"{src}\n")
    own_site = tmp_path / "session-site"
    own_site.mkdir()
    monkeypatch.setenv("DIFFOPT_VENV", str(tmp_path / "main"))

    _noxfile()._see_main_venv(_Session(own_site))

    # A fresh interpreter that processes the session venv's site folder, as its site.py would.
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import site; site.addsitedir({str(own_site)!r}); import stack_probe_pkg; "
            "print(stack_probe_pkg.ANSWER)",
        ],
        capture_output=True,
        text=True,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "42"
