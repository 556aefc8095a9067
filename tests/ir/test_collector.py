"""``collector_paused``: the cyclic garbage collector is off while grammars are built and
back in its earlier state afterwards, with nested and concurrent stages and on errors."""

from __future__ import annotations

import gc
import threading

import pytest

import treegram
from treegram.automaton import build_automaton
from treegram.ir import collector_paused


@pytest.fixture(autouse=True)
def _restore_collector():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_inside_and_restored_after_nesting():
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer stage is still running
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_restored_when_the_body_raises():
    gc.enable()
    with pytest.raises(ValueError, match="boom"), collector_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_concurrent_stages_restore_once_the_last_leaves():
    gc.enable()
    inside, release = threading.Event(), threading.Event()

    def stage():
        with collector_paused():
            inside.set()
            release.wait(10)

    worker = threading.Thread(target=stage)
    worker.start()
    assert inside.wait(10)
    with collector_paused():
        pass
    assert not gc.isenabled()  # the worker's stage has not ended
    release.set()
    worker.join(10)
    assert gc.isenabled()


def test_compiling_leaves_the_collector_on_and_pauses_it_meanwhile(monkeypatch):
    gc.enable()
    seen = []
    original = treegram.automaton._build._build

    def spy(ir):
        seen.append(gc.isenabled())
        return original(ir)

    monkeypatch.setattr(treegram.automaton._build, "_build", spy)
    grammar = treegram.Grammar.from_json_schema({"type": "object", "properties": {"a": {}}})
    assert gc.isenabled()
    build_automaton(grammar.ir)
    assert seen == [False] and gc.isenabled()
    with pytest.raises(treegram.UnsupportedSchemaError):  # raised inside the converter
        treegram.Grammar.from_json_schema(
            {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
        )
    assert gc.isenabled()
