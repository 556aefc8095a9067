"""Smoke test: benchmarks/mask_costs.py runs end to end on 2 schemas (no timing asserted),
and its JSON positions and construct buckets are right on small cases."""

from __future__ import annotations

import json

import pytest
from bench_setup import benchmark_fixture, maskbench_folder, read_json

pytest.importorskip("tokenizers")


costs = benchmark_fixture("mask_costs")


def test_position_at(costs):
    text = json.dumps({"a": "xy", "b": [1, {"c": 25}], "d": True})
    assert costs.position_at(text, 0) == ("value", [])
    assert costs.position_at(text, 1) == ("key", [])  # after "{"
    assert costs.position_at(text, 3) == ("key", [])  # inside "a"
    assert costs.position_at(text, text.index('"xy"') + 2) == ("string", ["a"])
    assert costs.position_at(text, text.index("[1") + 1) == ("value", ["b", 0])
    assert costs.position_at(text, text.index("25") + 1) == ("number", ["b", 1, "c"])
    assert costs.position_at(text, text.index("25") + 2) == ("after", ["b", 1, "c"])
    assert costs.position_at(text, text.index("True".lower()) + 1) == ("literal", ["d"])


def test_construct_of(costs):
    root = {
        "type": "object",
        "properties": {
            "p": {"type": "string", "pattern": "^[a-z]+$"},
            "e": {"$ref": "#/$defs/big"},
            "n": {"type": "integer", "minimum": 3},
            "u": {"anyOf": [{"type": "null"}, {"type": "string"}, {"type": "number"}, {}]},
        },
        "$defs": {"big": {"enum": list(range(30))}},
    }

    def bucket(place, path):
        return costs.construct_of(costs.subschema_at(root, path), place, root)[0]

    assert bucket("string", ["p"]) == "pattern string"
    assert bucket("value", ["e"]) == "large enum"
    assert bucket("number", ["n"]) == "number with bounds"
    assert bucket("value", ["u"]) == "wide anyOf"
    assert bucket("key", []) == "object keys"


def test_runs_on_two_schemas(costs, tmp_path):
    schemas = {
        "keys": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"enum": [1, 2]}}},
        "words": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}},
    }
    tests = {
        "keys": [{"valid": True, "data": {"a": "xy", "b": 2}}],
        "words": [{"valid": True, "data": ["ab", "cde"]}],
    }
    data = maskbench_folder(tmp_path / "data", schemas, tests)
    out = tmp_path / "costs.json"
    args = ["--data", str(data), "--spread", "0", "--every", "1", "--threshold-ms", "0", "--quiet"]
    result = costs.main([*args, "--output", str(out)])
    written = read_json(out)
    assert written["meta"]["n_schemas"] == 2
    # threshold 0: every mask is reported, with its parts adding up to its time
    assert written["meta"]["n_slow"] == written["meta"]["n_masks"] > 0
    for mask in written["slowest"]:
        assert sum(mask["parts_ms"].values()) == pytest.approx(mask["ms"], rel=0.05, abs=0.01)
    assert sum(c["n"] for c in written["by_construct"].values()) == written["meta"]["n_slow"]
    assert result["meta"]["n_masks"] == written["meta"]["n_masks"]
