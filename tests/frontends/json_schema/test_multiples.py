"""``multipleOf`` with decimal values (``0.01`` is how money is written) and its negation.

The oracle is ``jsonschema`` with exact decimal arithmetic for ``multipleOf``
(:func:`schema_matching.exact_validator`; ``jsonschema`` itself divides binary floats).
Numbers under ``multipleOf`` are written without exponent, so instances are written with
``format(Decimal)`` in plain notation.
"""

from __future__ import annotations

import json
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schema_matching import accepts, compile_schema, exact_validator

from treegram.frontends.json_schema._multiples import multiple_parts, multiples_dfa

MULTIPLES = [0.01, 0.25, 1.5, 3, 0.3, 7, 0.07, 2.5, 1e-05, 100, 12.5, 0.2]


def _plain(d: Decimal) -> str:
    text = format(d, "f")
    return text


_decimals = st.decimals(
    min_value=Decimal("-1000"), max_value=Decimal("1000"), allow_nan=False, places=4
)


@pytest.mark.parametrize("m", MULTIPLES)
@settings(max_examples=60, deadline=None)
@given(st.lists(_decimals, min_size=1, max_size=20), st.integers(-40, 40))
def test_automaton_is_exact_arithmetic(m, values, k):
    d = multiples_dfa(m)
    f = Fraction(str(m))
    # a multiple written with extra trailing zeros is still one
    multiple = Decimal(k * f.numerator) / Decimal(f.denominator)
    for value in [*values, multiple]:
        for text in (_plain(value), _plain(value) + ("0" if "." in _plain(value) else ".0")):
            expected = (Fraction(text) / f).denominator == 1
            assert d.accepts(text) == expected, (m, text)


def test_parts():
    assert multiple_parts(0.01) == (1, 2)  # at most two significant fraction digits
    assert multiple_parts(0.25) == (25, 2)  # x * 100 divisible by 25
    assert multiple_parts(1.5) == (15, 1)
    assert multiple_parts(7) == (7, 0)


SCHEMAS = [
    {"type": "number", "multipleOf": 0.01},
    {"type": "number", "multipleOf": 0.25, "minimum": -3, "maximum": 5},
    {"type": "number", "multipleOf": 0.5, "exclusiveMinimum": 0},
    {"type": "integer", "multipleOf": 1.5},
    {"multipleOf": 0.1, "not": {"type": "integer"}},
    {"type": "number", "not": {"multipleOf": 0.5}},
    {"type": "integer", "not": {"multipleOf": 3}},
    {"type": "number", "allOf": [{"multipleOf": 0.2}, {"multipleOf": 0.3}]},
    {"type": "number", "multipleOf": 0.07, "maximum": 1},
]


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
@settings(max_examples=40, deadline=None)
@given(st.lists(_decimals, min_size=1, max_size=12))
def test_matches_jsonschema(index, values):
    schema = SCHEMAS[index]
    cg = _compiled(index)
    validator = exact_validator(schema)
    fixed = ["0", "1", "-1", "0.5", "1.5", "-0.25", "0.07", "0.3", "0.6", "2.00", "3.0", "1.01"]
    for text in [*fixed, *(_plain(v) for v in values)]:
        value = json.loads(text)
        assert accepts(cg, text) == validator.is_valid(value), (schema, text)


_CACHE: dict[int, object] = {}


def _compiled(index: int):
    if index not in _CACHE:
        _CACHE[index] = compile_schema(SCHEMAS[index], strict_mode=False, canonical_integers=False)
    return _CACHE[index]


def test_money_is_two_fraction_digits():
    cg = compile_schema({"type": "number", "multipleOf": 0.01, "minimum": 0})
    for text in ("0", "19.99", "5.5", "100.10", "3.000"):
        assert accepts(cg, text), text
    for text in ("19.999", "0.001", "-1.5", "1e2"):  # a third digit, negative, exponent
        assert not accepts(cg, text), text
