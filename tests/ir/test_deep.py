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


def _recording(monkeypatch, module) -> list:
    calls = []

    def record(fn, *args, **kwargs):
        calls.append(getattr(fn, "__name__", fn))
        return with_frame_room(fn, *args, **kwargs)

    monkeypatch.setattr(module, "with_frame_room", record)
    return calls


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "string"}}},  # the caller's stack
        {
            "$defs": {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(40)}
            | {"d40": {"type": "integer"}},
            "$ref": "#/$defs/d0",
        },  # the deep thread
    ],
    ids=["shallow", "deep"],
)
def test_the_json_schema_frontend_converts_in_the_room(monkeypatch, schema):
    import treegram.frontends.json_schema._convert as convert

    on_caller = _recording(monkeypatch, convert)
    on_thread = _recording(monkeypatch, deep)
    json_schema_to_ir(json.dumps(schema))
    assert "_convert" in on_caller + on_thread


def test_the_automaton_builds_in_the_room(monkeypatch):
    import treegram.automaton._build as build

    ir = json_schema_to_ir(json.dumps({"type": "array", "items": {"type": "number"}}))
    calls = _recording(monkeypatch, build)
    build_automaton(ir)
    assert calls and calls[0] == "_build"
