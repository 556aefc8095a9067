"""The opt-in widening (``unsupported="warn"``): a schema treegram cannot compile exactly is
served by the language without the unsupported keyword, with a warning naming the keyword
and its JSON pointer; the widened grammar never rejects a valid instance. Without the
option the refusal's message names it.

The oracle is ``jsonschema`` (exact ``multipleOf``, formats asserted): every instance it
validates must be accepted by the widened grammar, also where the keyword sits under
``not``, ``oneOf`` or ``if``, where dropping it naively would narrow the language.
"""

from __future__ import annotations

import json
import re
import warnings

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schema_matching import accepts, compile_schema, exact_validator

from treegram.errors import UnsupportedSchemaError
from treegram.frontends.json_schema import json_schema_to_ir

# Keywords (and combinations) that treegram refuses in its exact mode.
REFUSED = [
    {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
    {"type": "array", "uniqueItems": True},
    {"type": "string", "format": "regex", "maxLength": 5},  # regex alone is a grammar
    {"type": "string", "pattern": "^(?=a)\\w+$"},
    {"type": "string", "pattern": "(a)\\1"},
    {"type": "string", "format": "email", "maxLength": 2000},
    {"type": "array", "contains": {"type": "integer"}, "unevaluatedItems": False},
    {"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "string"}},
    {"$dynamicRef": "#node"},
]


@pytest.mark.parametrize("index", range(len(REFUSED) - 1))
def test_refusals_name_the_option(index):
    schema = REFUSED[index]
    try:
        json_schema_to_ir(schema, strict_mode=False)
    except UnsupportedSchemaError as exc:
        assert "unsupported='warn'" in str(exc), str(exc)
        keyword = re.search(r"keyword '([^']+)' at (\S+):", str(exc))
        assert keyword is not None, str(exc)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        json_schema_to_ir(schema, strict_mode=False, unsupported="warn")
    for w in caught:
        text = str(w.message)
        if "widened" in text:
            assert re.search(r"keyword '[^']+' at \S+ widened", text), text


_leaf = st.one_of(
    st.sampled_from(REFUSED[:8]),
    st.just({"type": "array", "items": {"type": "string"}, "uniqueItems": True}),  # exact
    st.builds(lambda t: {"type": t}, st.sampled_from(["string", "array", "integer", "null"])),
    st.builds(lambda n: {"minItems": n}, st.integers(0, 2)),
    st.builds(lambda n: {"maxLength": n}, st.integers(0, 2)),
    st.just(True),
)


def _logic(children):
    return st.one_of(
        st.builds(lambda c: {"not": c}, children),
        st.builds(lambda xs: {"oneOf": xs}, st.lists(children, min_size=2, max_size=3)),
        st.builds(lambda xs: {"anyOf": xs}, st.lists(children, min_size=1, max_size=2)),
        st.builds(lambda xs: {"allOf": xs}, st.lists(children, min_size=1, max_size=2)),
        st.builds(lambda i, t, e: {"if": i, "then": t, "else": e}, children, children, children),
        st.builds(lambda c: {"type": "array", "items": c}, children),
    )


_schemas = st.recursive(_leaf, _logic, max_leaves=4)
_values = st.recursive(
    st.one_of(
        st.none(),
        st.integers(-2, 2),
        st.sampled_from(["", "a", "ab", "a@b.c", "(", "a.b"]),
    ),
    lambda c: st.lists(c, max_size=3),
    max_leaves=6,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_schemas, st.lists(_values, min_size=1, max_size=8))
def test_widened_grammar_accepts_every_valid_instance(schema, values):
    # formats asserted, as treegram does (under an "if", an annotation would flip the
    # branch); on these values jsonschema's email and regex checks agree with treegram's
    validator = exact_validator(schema).evolve(format_checker=jsonschema.FormatChecker())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            cg = compile_schema(schema, strict_mode=False, unsupported="warn")
        except UnsupportedSchemaError:
            pytest.fail(f"refused although widening was asked for: {schema}")
        except Exception as exc:  # noqa: BLE001 - only "no value" may remain
            assert "admits no JSON value" in str(exc), (schema, exc)
            assert not any(validator.is_valid(v) for v in values)
            return
    for value in values:
        if validator.is_valid(value):
            text = json.dumps(value)
            assert accepts(cg, text), (schema, text)


@pytest.mark.parametrize(
    "schema, value",
    [
        # oneOf [true, B] is "not B": widened, "not B" grows to every value, and the
        # complement of that would be nothing, rejecting [null, 0] (which is valid)
        ({"not": {"oneOf": [True, {"type": "array", "uniqueItems": True}]}}, [None, 0]),
        ({"not": {"not": {"not": {"type": "array", "uniqueItems": True}}}}, [1, 1]),
        (
            {"not": {"if": {"type": "array", "uniqueItems": True}, "then": False}},
            [1, 2],
        ),
    ],
)
def test_a_negation_of_a_widened_schema_is_widened(schema, value):
    assert exact_validator(schema).is_valid(value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cg = compile_schema(schema, unsupported="warn", strict_mode=False)
    assert accepts(cg, json.dumps(value))
    # without widening, the negation is refused rather than narrowed
    with pytest.raises(UnsupportedSchemaError):
        json_schema_to_ir(schema, strict_mode=False)
