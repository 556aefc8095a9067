"""treegram's own JSON Schema validator (used for enum/const siblings, propertyNames and
oneOf disjointness) against the official test suite's expected answers."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from treegram.frontends.json_schema._convert import Converter, Layout
from treegram.frontends.json_schema._refs import RefIndex
from treegram.frontends.json_schema._validate import UndecidedError, Validator, json_equal

SUITE = Path(__file__).resolve().parents[2] / "data" / "json_schema_test_suite" / "draft2020-12"
# Groups whose $ref names the JSON Schema meta-schema, which treegram does not bundle
# (the converter refuses such a $ref unless it is given in remote_schemas).
META_SCHEMA_GROUPS = {("defs.json", 0), ("ref.json", 6)}


def _groups():
    for path in sorted(SUITE.glob("*.json")):
        for gi, group in enumerate(json.loads(path.read_text(encoding="utf-8"))):
            yield path.name, gi, group


def test_agrees_with_the_suite():
    decided = undecided = 0
    wrong = []
    for name, gi, group in _groups():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # unresolvable meta-schema refs warn
            conv = Converter(
                group["schema"],
                Layout(True, None, None, None),
                False,
                "warn",
                RefIndex(group["schema"]),
            )
            validator = Validator(conv)
            for ti, test in enumerate(group["tests"]):
                try:
                    got = validator.is_valid(conv.root, test["data"])
                except UndecidedError:
                    undecided += 1
                    continue
                decided += 1
                if got != test["valid"] and (name, gi) not in META_SCHEMA_GROUPS:
                    wrong.append((name, gi, ti, group["description"], test["description"]))
    assert wrong == []
    assert decided > 900 and undecided < 20, (decided, undecided)


@pytest.mark.parametrize(
    "a, b, equal",
    [
        (1, 1.0, True),
        (True, 1, False),
        (0, False, False),
        ([1, {"a": 2}], [1.0, {"a": 2.0}], True),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ("1", 1, False),
        (None, None, True),
        ([], {}, False),
    ],
)
def test_json_equality(a, b, equal):
    assert json_equal(a, b) is equal
    assert json_equal(b, a) is equal


def test_unevaluated_is_undecided():
    conv = Converter({}, Layout(True, None, None, None), False, "error", RefIndex({}))
    with pytest.raises(UndecidedError):
        Validator(conv).is_valid({"unevaluatedProperties": False}, {"a": 1})
