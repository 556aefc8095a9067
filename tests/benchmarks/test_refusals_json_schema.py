"""Smoke test: benchmarks/refusals_json_schema.py runs end to end on a few schemas."""

from __future__ import annotations

import json

import jsonschema
from bench_setup import benchmark_fixture, read_json

script = benchmark_fixture("refusals_json_schema", register=True)


def test_causes_are_normalised(script):
    detail = (
        "UnsupportedSchemaError: unsupported JSON Schema keyword 'uniqueItems' at "
        "/properties/a/uniqueItems: the items are not a small finite set (compile with "
        "unsupported='warn' to widen it instead)"
    )
    assert script.cause_of(detail) == "uniqueItems: the items are not a small finite set"
    assert script.cause_of("GrammarError: nested deeper than 1000 at /a/b") == (
        "GrammarError: nested deeper than N at PTR"
    )


def test_runs_on_a_few_schemas(script, tmp_path):
    data = tmp_path / "sample"
    data.mkdir()
    schemas = {
        "ok.json": {"type": "object", "properties": {"a": {"type": "integer"}}},
        "refused.json": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
        "empty.json": {"type": "string", "minLength": 3, "maxLength": 1},
    }
    instances = {
        "ok.json": [{"a": 1}, {"a": "x"}, {"a": 2, "b": True}, []],
        "refused.json": [[1, 2], [1, 1], ["x"]],
        "empty.json": ["abc"],
    }
    for name, schema in schemas.items():
        # validity from the jsonschema package (the oracle), as MaskBench files give it
        tests = [
            {"data": x, "valid": jsonschema.Draft202012Validator(schema).is_valid(x)}
            for x in instances[name]
        ]
        (data / name).write_text(json.dumps({"schema": schema, "tests": tests}), encoding="utf-8")
    out = tmp_path / "refusals.json"
    result = script.main(
        ["--data", str(data), "--modes", "default", "widen", "--quiet", "--output", str(out)]
    )
    written = read_json(out)
    assert written["meta"]["n_schemas"] == 3
    default, widen = result["modes"]["default"], result["modes"]["widen"]
    assert default["schemas"] == 3 and default["refused"] == 2
    assert sorted(i["file"] for items in default["causes"].values() for i in items) == [
        "empty.json",
        "refused.json",
    ]
    assert widen["refused"] == 1  # widening serves uniqueItems; "no value" stays an error
    assert any("uniqueItems" in w for w in widen["warnings"])
    # the walk: strict_mode (the default) closes ok.json's object, so its valid
    # {"a": 2, "b": true} is rejected there; widened, the duplicate [1, 1] is accepted
    # and every valid instance is (strict_mode=False in the widen pass)
    assert default["tests_walked"] == 4
    assert default["valid_rejected_schemas"] == {"ok.json": [2]}
    assert default["invalid_accepted"] == 0
    assert widen["tests_walked"] == 7 and widen["widened_schemas"] == 1
    assert widen["valid_rejected"] == 0
    assert widen["invalid_accepted_schemas"] == {"refused.json": [1]}
    assert widen["invalid_accepted_widened"] == 1
