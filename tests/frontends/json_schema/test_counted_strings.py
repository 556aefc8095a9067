"""Length bounds beside a pattern as counted repetitions (``counted_string_expr``): where
the pattern's automaton is ``avoid | prefix loop* suffix`` the bound counts loop rounds
instead of needing a state per length, so ``maxLength: 10000`` compiles. Checked against
the ``jsonschema`` package on random strings at and around the bounds (raw and ``\\uXXXX``
spellings), and against xgrammar inside the bounds (xgrammar ignores length bounds next to
a pattern)."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
from schema_matching import accepts as matcher_accepts
from schema_matching import compile_schema

from treegram.frontends.json_schema._convert import json_schema_to_ir
from treegram.ir import Choice, Repeat, Seq

# prefixes of three lengths before the loop (a MaskBench schema has it with maxLength 32767)
_DATA_URL = "^data:image/(jpg|jpeg|png|svg\\+xml);base64,[0-9a-zA-Z+/=]*$"
_PNG = "data:image/png;base64,"

COUNTED = [
    # (schema, a valid string's prefix, loop characters, suffix; characters outside)
    ({"type": "string", "maxLength": 10000, "pattern": "^[a-z0-9 ]*$"}, ("", "az9 ", ""), "A-é"),
    (
        {"type": "string", "minLength": 3, "maxLength": 64, "pattern": "^[a-z][a-z0-9_]*$"},
        ("q", "az_9", ""),
        "A-",
    ),
    (
        {"type": "string", "minLength": 2, "maxLength": 6, "pattern": "^x[0-9]*y$"},
        ("x", "09", "y"),
        "xa",
    ),
    (
        {"type": "string", "minLength": 70, "maxLength": 130, "pattern": "^é[ab]*$"},
        ("é", "ab", ""),
        "éc",
    ),
    ({"type": "string", "maxLength": 3, "pattern": "^(b|a[0-9]*)$"}, ("a", "01", ""), "ab"),
    ({"type": "string", "minLength": 5, "pattern": "^[0-9]+$"}, ("0", "09", ""), "a"),
    ({"type": "string", "maxLength": 40, "pattern": _DATA_URL}, (_PNG, "aZ9+/=", ""), "-_"),
    (
        {"type": "string", "minLength": 3, "maxLength": 8, "pattern": "^[0-9]*(a|bx)?$"},
        ("", "0189", "bx"),
        "ac",
    ),
]


def valid(schema: dict, text: str) -> bool:
    """jsonschema's verdict, with ECMA-262's ``$`` (end of input, unlike Python's)."""
    if schema.get("pattern", "").endswith("$"):
        schema = {**schema, "pattern": schema["pattern"][:-1] + "\\Z"}
    return jsonschema.Draft202012Validator(schema).is_valid(text)


def spell(text: str, escaped: bool) -> str:
    """``text`` as a JSON string literal: as ``json.dumps`` writes it, or every character
    as a ``\\uXXXX`` escape."""
    if not escaped:
        return json.dumps(text, ensure_ascii=False)
    return '"' + "".join(f"\\u{ord(ch):04x}" for ch in text) + '"'


def _repeats(expr) -> list[Repeat]:
    out, stack = [], [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Repeat):
            out.append(node)
            stack.append(node.item)
        elif isinstance(node, (Seq, Choice)):
            stack.extend(node.items)
    return out


def _texts(index: int, seed: int) -> list[str]:
    """Random strings with lengths at and next to the bounds: the pattern's shape (prefix,
    loop characters, suffix), and the same with one character from outside."""
    schema, (prefix, loop, suffix), outside = COUNTED[index]
    rng = random.Random(seed)
    lo, hi = schema.get("minLength", 0), schema.get("maxLength", schema.get("minLength", 0) + 8)
    lengths = sorted({n for b in (lo, hi) for n in (b - 2, b - 1, b, b + 1) if n >= 0})
    out = []
    for n in lengths:
        middle = n - len(prefix) - len(suffix)
        text = prefix + "".join(rng.choice(loop) for _ in range(max(0, middle))) + suffix
        text = text[:n]
        out.append(text)
        if text:
            k = rng.randrange(len(text))
            out.append(text[:k] + rng.choice(outside) + text[k + 1 :])
    return out


@pytest.mark.parametrize("index", range(len(COUNTED)))
def test_bounds_count_loop_rounds(index):
    schema, (prefix, _, suffix), _ = COUNTED[index]
    ir = json_schema_to_ir(schema)
    bounds = {(r.min, r.max) for rule in ir.rules for r in _repeats(rule.body)}
    lo, hi = schema.get("minLength", 0), schema.get("maxLength")
    # a repetition of the loop counts the rounds that the bounds leave beside the
    # prefix and suffix of a valid string
    fixed = len(prefix) + len(suffix)
    assert (max(0, lo - fixed), None if hi is None else hi - fixed) in bounds
    assert len(ir.rules) < 10


@pytest.mark.parametrize("index", range(len(COUNTED)))
def test_counted_strings_match_jsonschema(index):
    schema = COUNTED[index][0]
    cg = compile_schema(schema)
    checked = {True: 0, False: 0}
    for k, text in enumerate(_texts(index, seed=index)):
        expected = valid(schema, text)
        checked[expected] += 1
        literal = spell(text, k % 3 == 1)  # every third string: \uXXXX every character
        assert matcher_accepts(cg, literal) == expected, (schema, len(text), text[:20])
    assert checked[True] and checked[False]  # both sides of the bound were tried


# not the first schema: xgrammar's test matcher takes seconds over 10,000 characters
@pytest.mark.parametrize("index", range(1, len(COUNTED)))
def test_counted_strings_match_xgrammar_inside_the_bounds(index):
    xgr = pytest.importorskip("xgrammar")
    xt = pytest.importorskip("xgrammar.testing")
    schema = COUNTED[index][0]
    theirs = xgr.Grammar.from_json_schema(json.dumps(schema))
    cg = compile_schema(schema)
    lo, hi = schema.get("minLength", 0), schema.get("maxLength")
    inside = [t for t in _texts(index, seed=100 + index) if lo <= len(t) <= (hi or len(t))]
    assert inside
    for text in inside:
        literal = json.dumps(text, ensure_ascii=False)
        assert matcher_accepts(cg, literal) == xt._is_grammar_accept_string(theirs, literal)


def test_patterns_without_one_loop_are_counted_by_the_matcher():
    # a search pattern loops through several states: no counted repetition; past 2,000
    # product states the string's content is a counted rule (test_bounded_strings.py)
    schema = {"type": "string", "maxLength": 20000, "pattern": "abc"}
    ir = json_schema_to_ir(schema)
    assert [r.max_string_chars for r in ir.rules if r.max_string_chars] == [20000]
    cg = compile_schema(schema)
    assert matcher_accepts(cg, json.dumps("x" * 19997 + "abc"))
    assert not matcher_accepts(cg, json.dumps("x" * 19998 + "abc"))
    assert not matcher_accepts(cg, json.dumps("x" * 19997))
    cg = compile_schema({"type": "string", "maxLength": 5, "pattern": "abc"})
    assert matcher_accepts(cg, '"xabcx"') and not matcher_accepts(cg, '"xabcxy"')


def test_integral_float_bounds_count_like_ints():
    cg = compile_schema({"type": "string", "minLength": 2.0, "maxLength": 3.0, "pattern": "^a*$"})
    assert [matcher_accepts(cg, json.dumps("a" * n)) for n in range(5)] == [
        False,
        False,
        True,
        True,
        False,
    ]


def test_a_bound_past_the_former_state_limit_with_prefixes_of_several_lengths():
    cg = compile_schema({"type": "string", "maxLength": 12000, "pattern": _DATA_URL})
    longest = "data:image/svg+xml;base64," + "A" * (12000 - 26)
    assert matcher_accepts(cg, json.dumps(longest))
    assert not matcher_accepts(cg, json.dumps(longest + "A"))
    assert matcher_accepts(cg, json.dumps(_PNG + "=" * 100))
