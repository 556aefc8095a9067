"""The frame room of the deep-stack runner: stages run from a frame that reserves room on
the interpreter's frame stack (so a recursion does not map and unmap a frame-stack chunk
at each crossing of a chunk's end)."""

from __future__ import annotations

import json

import pytest

import treegram.ir._deep as deep
from treegram.automaton import build_automaton
from treegram.frontends.json_schema import json_schema_to_ir
from treegram.ir import run_deep, with_frame_room


def test_with_frame_room_passes_arguments_and_result():
    assert with_frame_room(divmod, 17, 5) == (3, 2)
    assert with_frame_room(dict, a=1, b=2) == {"a": 1, "b": 2}


def test_with_frame_room_passes_exceptions():
    with pytest.raises(ZeroDivisionError):
        with_frame_room(divmod, 1, 0)


def test_with_frame_room_reserves_the_room():
    # the whole point: a frame far larger than one 16 KiB chunk of frames
    assert with_frame_room.__code__.co_stacksize >= deep._FRAME_ROOM_SLOTS >= 1 << 16


def test_a_recursion_runs_inside_the_room():
    def depth(n: int) -> int:
        return 0 if n == 0 else 1 + depth(n - 1)

    assert with_frame_room(run_deep, depth, 5000) == 5000


def test_run_deep_runs_in_the_room(monkeypatch):
    calls = []

    def record(fn, *args, **kwargs):
        calls.append(fn)
        return with_frame_room(fn, *args, **kwargs)

    monkeypatch.setattr(deep, "with_frame_room", record)
    assert run_deep(divmod, 7, 2) == (3, 1)
    assert calls == [divmod]


def test_a_deep_schema_converts_in_the_room(monkeypatch):
    """A schema with a long $ref chain is converted on the deep thread, in the room."""
    calls = []

    def record(fn, *args, **kwargs):
        calls.append(getattr(fn, "__name__", fn))
        return with_frame_room(fn, *args, **kwargs)

    monkeypatch.setattr(deep, "with_frame_room", record)
    defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(40)}
    defs["d40"] = {"type": "integer"}
    ir = json_schema_to_ir(json.dumps({"$defs": defs, "$ref": "#/$defs/d0"}))
    assert calls == ["_convert"]
    build_automaton(ir)  # shallow IR: built on the caller's stack
    assert calls == ["_convert"]
