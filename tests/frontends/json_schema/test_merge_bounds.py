"""The bound on merges (``MAX_MERGES``), checked at each merge, and comparisons of derived
schemas that stay cheap.

A conversion that distributes too many ``allOf`` parts is refused naming the construct,
the bound and a JSON pointer; a chain of conditions that needs fewer merges than the bound
(the shape of MaskBench ``minecraft-biome``'s particle options) is served, widened or
not, and its language matches the ``jsonschema`` package on generated instances.
"""

from __future__ import annotations

import itertools
import json
import re

import pytest
from schema_matching import accepts, compile_schema, exact_validator

from treegram import UnsupportedSchemaError
from treegram.frontends.json_schema._convert import MAX_MERGES, json_schema_to_ir
from treegram.frontends.json_schema._keywords import same_value


def _conditions(n: int) -> dict:
    """An object whose ``type`` member picks, through ``n`` ``if``/``then`` parts, which
    further members it may have (closed per kind, open otherwise)."""
    return {
        "type": "object",
        "properties": {"type": {"type": "string"}, "value": {"type": "object"}},
        "allOf": [
            {
                "if": {"properties": {"type": {"const": f"k{i}"}}},
                "then": {
                    "properties": {"type": {"type": "string"}, f"f{i}": {"type": "integer"}},
                    "additionalProperties": False,
                },
            }
            for i in range(n)
        ],
    }


def test_too_many_merges_are_refused_with_a_pointer():
    with pytest.raises(UnsupportedSchemaError) as info:
        # widened: the keywords that refuse it sooner otherwise are warnings
        json_schema_to_ir(_conditions(12), strict_mode=False, unsupported="warn")
    message = str(info.value)
    assert f"more than {MAX_MERGES} merges" in message
    assert "keyword 'allOf' at /" in message  # no oneOf expanded: the allOf is named
    where = re.search(r" at (\S+): ", message).group(1)
    assert where.startswith("/") and "(" not in where and "'" not in where


@pytest.mark.parametrize("options", [{}, {"strict_mode": False, "unsupported": "warn"}])
def test_condition_chain_under_the_bound_is_served(options):
    schema = _conditions(6)
    cg = compile_schema(schema, **options)
    validator = exact_validator(schema)
    members = [
        ("type", "k0"),
        ("type", "k3"),
        ("type", "other"),
        ("type", 5),
        ("value", {}),
        ("f0", 1),
        ("f3", 2),
        ("f3", "x"),
        ("g", 1),
    ]
    seen = set()
    for r in range(4):
        for combo in itertools.combinations(members, r):
            names = [k for k, _ in combo]
            if len(set(names)) < len(names):
                continue
            value = dict(combo)
            valid = validator.is_valid(value)
            if options.get("strict_mode", True) and valid:
                # strict_mode closes the object to its declared names
                valid = set(value) <= {"type", "value"}
            seen.add(valid)
            assert accepts(cg, json.dumps(value)) == valid, value
    assert seen == {True, False}


def test_same_value_matches_json_dumps():
    values = [None, True, False, 0, 1, 1.0, -0.0, 2.5, "a", "1", [], [1], (1,), [1.0], {}]
    values += [{"a": 1}, {"a": 1.0}, {"a": True}, {"b": 1, "a": [1, 2]}, {"a": [1, 2], "b": 1}]
    for a in values:
        for b in values:
            expected = json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
            assert same_value(a, b) == expected, (a, b)


def test_same_value_walks_shared_parts_once():
    # written out, this DAG has 2**60 leaves; compared part by part it is 60 pairs
    a: object = {"leaf": 1}
    b: object = {"leaf": 1}
    for _ in range(60):
        a, b = {"x": a, "y": a}, {"x": b, "y": b}
    assert same_value(a, b)
    c = {"x": b, "y": {"leaf": 2}}
    assert not same_value({"x": a, "y": a}, c)


def test_same_value_bounded_says_different_past_its_parts():
    a = {"x": [{"y": i} for i in range(100)]}
    b = {"x": [{"y": i} for i in range(100)]}
    assert same_value(a, b)
    assert same_value(a, b, 500)
    assert not same_value(a, b, 50)  # past the bound: "different" (safe for merges)
