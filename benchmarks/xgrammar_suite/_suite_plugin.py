"""pytest plugin loaded into xgrammar's test run by ``run_suite.py`` (not part of treegram).

It records which ``xgrammar`` the tests import, lists the collected tests, runs only the
tests the runner asks for, stops a test that runs past its time limit, and appends every
outcome to a JSON-lines file as soon as it is known, so a crash loses nothing but the test
that crashed.

Environment (set by ``run_suite.py``):

- ``XGR_SUITE_EVENTS``: the JSON-lines file to append to.
- ``XGR_SUITE_ONLY``: a file of node ids, one a line; other tests are deselected.
- ``XGR_SUITE_TIMEOUT``: the per-test limit in seconds.
- ``XGR_SUITE_IGNORE_TEXT``: when ``1``, the suite's helpers that compare a grammar's
  printed EBNF text with xgrammar's (``check_stag_with_grammar``,
  ``check_grammar_with_expected_grammar``) only build the grammar; a measurement of how
  many tests fail on the printed text alone, never the headline count.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
from pathlib import Path

import pytest

_EVENTS = os.environ.get("XGR_SUITE_EVENTS")
_ONLY = os.environ.get("XGR_SUITE_ONLY")
_TIMEOUT = float(os.environ.get("XGR_SUITE_TIMEOUT", "60"))
_IGNORE_TEXT = os.environ.get("XGR_SUITE_IGNORE_TEXT") == "1"
# A kernel that never returns to the interpreter cannot be interrupted by a signal
# handler; past this extra margin faulthandler ends the process and the runner resumes.
_HARD_MARGIN = 30.0


class SuiteTimeoutError(Exception):
    """A test ran past ``XGR_SUITE_TIMEOUT`` seconds."""


def _emit(record: dict) -> None:
    if not _EVENTS:
        return
    with open(_EVENTS, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    import xgrammar

    _emit({"event": "xgrammar", "file": str(Path(xgrammar.__file__).resolve())})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _emit(
        {
            "event": "collected",
            "tests": [
                {"id": it.nodeid, "hf_token_required": "hf_token_required" in it.keywords}
                for it in items
            ],
        }
    )
    if _IGNORE_TEXT:
        _build_instead_of_comparing_text(items)
    if _ONLY:
        wanted = set(Path(_ONLY).read_text(encoding="utf-8").split("\n"))
        keep = [it for it in items if it.nodeid in wanted]
        config.hook.pytest_deselected(items=[it for it in items if it.nodeid not in wanted])
        items[:] = keep


def _build_only(structural_tag_format: object, expected_grammar_ebnf: str) -> None:
    import xgrammar

    tag = {"type": "structural_tag", "format": structural_tag_format}
    xgrammar.Grammar.from_structural_tag(tag)


def _no_text_check(grammar: object, expected_grammar: str) -> None:
    return None  # the callers check the grammar's language right after


def _build_instead_of_comparing_text(items: list[pytest.Item]) -> None:
    modules = {id(m): m for m in (getattr(it, "module", None) for it in items) if m is not None}
    for module in modules.values():
        if hasattr(module, "check_stag_with_grammar"):
            module.check_stag_with_grammar = _build_only
        if hasattr(module, "check_grammar_with_expected_grammar"):
            module.check_grammar_with_expected_grammar = _no_text_check


def _on_alarm(signum: int, frame: object) -> None:
    raise SuiteTimeoutError(f"test ran past {_TIMEOUT:g} s")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    _emit({"event": "start", "id": item.nodeid})
    faulthandler.dump_traceback_later(_TIMEOUT + _HARD_MARGIN, exit=True, file=sys.stderr)
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, _TIMEOUT)
    try:
        return (yield)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        faulthandler.cancel_dump_traceback_later()


def _crash_message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    if isinstance(report.longrepr, tuple):  # a skip: (file, line, reason)
        return str(report.longrepr[2])
    return str(report.longrepr)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.outcome != "passed":
        if report.when == "teardown" and report.outcome == "passed":
            return
        _emit(
            {
                "event": "report",
                "id": report.nodeid,
                "when": report.when,
                "outcome": report.outcome,
                "message": "" if report.outcome == "passed" else _crash_message(report)[:2000],
            }
        )


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _emit(
            {
                "event": "collect_error",
                "id": report.nodeid,
                "message": str(report.longrepr)[-2000:],
            }
        )
