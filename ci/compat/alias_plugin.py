"""pytest plugin: run a peer's own test suite against our package through an import alias.

Loaded with ``-p alias_plugin`` by ``ci/compat/run.py``. ``COMPAT_ALIAS=optree:optree_core``
makes ``import optree`` (and every ``optree.x`` submodule) return the very module objects of
``optree_core`` (``optree_core.x``); nothing in the peer's files is edited. Without the variable
the plugin only records outcomes, which is how the peer's native run is measured.

``COMPAT_FORGIVE_WORDING=1`` drops the ``match=`` pattern of ``pytest.raises``/``pytest.warns``
so a failure that differs from the peer only in an error message's words counts as a pass (the
exception type is still checked). ``COMPAT_OUTCOMES=FILE`` receives one JSON object:
{nodeid: "passed" | "failed" | "skipped"} plus ``"<collect>::<path>"`` keys for collection errors.
"""

from __future__ import annotations

import json
import os

import pytest
from compat_alias import install_alias


def _forgive_wording() -> None:
    if os.environ.get("COMPAT_FORGIVE_WORDING") != "1":
        return
    for name in ("raises", "warns"):
        original = getattr(pytest, name)

        def lenient(*args, __original=original, **kwargs):
            kwargs.pop("match", None)
            return __original(*args, **kwargs)

        setattr(pytest, name, lenient)


install_alias()
_forgive_wording()
_OUTCOMES: dict[str, str] = {}


def pytest_collectreport(report):
    if report.failed:
        _OUTCOMES[f"<collect>::{report.nodeid}"] = "failed"


def pytest_runtest_logreport(report):
    previous = _OUTCOMES.get(report.nodeid)
    if report.failed:
        _OUTCOMES[report.nodeid] = "failed"
    elif report.skipped and previous is None:
        _OUTCOMES[report.nodeid] = "skipped"
    elif report.when == "call" and report.passed and previous != "failed":
        _OUTCOMES[report.nodeid] = "passed"


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("COMPAT_OUTCOMES")
    if out:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(_OUTCOMES, f, indent=0, sort_keys=True)
