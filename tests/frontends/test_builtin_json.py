"""The built-in JSON grammar accepts exactly what xgrammar's builtin JSON grammar accepts.

treegram has no matcher at this layer, so our grammar is printed as EBNF (xgrammar's
dialect) and run through xgrammar's matcher; the oracle is xgrammar's own builtin.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treegram.frontends._builtin_json import BUILTIN_JSON_EBNF, builtin_json_grammar_ir
from treegram.grammar import Grammar, GrammarIR, grammar_to_ebnf, parse_ebnf

PASSING = [
    "{}",
    "[]",
    "{ }",
    "[ ]",
    "{\n\t\r }",
    "[\n]",
    "[0]",
    "[-0]",
    "[1]",
    "[-1.5e10]",
    "[1e5]",
    "[1E+5]",
    "[1e-05]",
    "[0.0]",
    "[-0.0e0]",
    "[1.25]",
    "[123456789012345678901234567890]",
    '["\\u00e9"]',
    '["\\uABCD\\uabcd"]',
    '["\\uD83D\\uDE00"]',
    '["é"]',
    '["中文😀"]',
    '["\\"\\\\\\/\\b\\f\\n\\r\\t"]',
    '["\x7f"]',
    '["\u2028\u00a0"]',
    '["#{}[],:"]',
    '[""]',
    '{"a":1}',
    '{"": ""}',
    '{"a" : 1 , "b" : [true,false,null]}',
    "[[[[]]]]",
    '[{}, {"": ""}]',
    '{"a":{"b":{"c":[]}}}',
    "[true]",
    "[null]",
    '["a", 1, true, null, {}, []]',
    "[ 1 , 2 ]",
    "[\n1\n]",
    '{\n  "k": [\n    1,\n    {"x": -2.5E-3}\n  ]\n}',
]

FAILING = [
    "",
    " {}",
    "{} ",
    "\n[]",
    "[]\n",
    "[]{}",
    "1",
    '"a"',
    "true",
    "null",
    "[01]",
    "[-01]",
    "[1.]",
    "[.5]",
    "[-]",
    "[+1]",
    "[1e]",
    "[1e+]",
    "[0x10]",
    "[--1]",
    "[1.5.5]",
    "[NaN]",
    "[Infinity]",
    "[-Infinity]",
    "[True]",
    "[nul]",
    "[1,]",
    "[,1]",
    "[1 2]",
    '{"a"}',
    '{"a":}',
    '{"a" 1}',
    "{a:1}",
    "{'a':1}",
    '{"a":1,}',
    '{"a":1 "b":2}',
    "{,}",
    '["\\x41"]',
    '["\\u12"]',
    '["\\uGGGG"]',
    '["\\a"]',
    '["\\U0001F600"]',
    '["\x00"]',
    '["\x01"]',
    '["\x1f"]',
    '["a\nb"]',
    '["\t"]',
    '["abc]',
    "[",
    "{",
    "[[]",
    "[]]",
    "{}}",
    "[\f1]",
    "[\v1]",
    "[\u00a01]",
    '{"a":1}}',
    "[1]]",
]


@pytest.fixture(scope="module")
def grammars() -> tuple[object, object]:
    """(xgrammar's builtin, our builtin compiled by xgrammar from our printed EBNF)."""
    xgr = pytest.importorskip("xgrammar")
    ours = xgr.Grammar.from_ebnf(grammar_to_ebnf(builtin_json_grammar_ir()))
    return xgr.Grammar.builtin_json_grammar(), ours


def _accepts(grammar: object, text: str) -> bool:
    from xgrammar.testing import _is_grammar_accept_string

    return _is_grammar_accept_string(grammar, text)


def test_table_size() -> None:
    assert len(PASSING) + len(FAILING) >= 60


@pytest.mark.parametrize("text", PASSING, ids=repr)
def test_passing(grammars: tuple[object, object], text: str) -> None:
    reference, ours = grammars
    assert _accepts(reference, text)
    assert _accepts(ours, text)


@pytest.mark.parametrize("text", FAILING, ids=repr)
def test_failing(grammars: tuple[object, object], text: str) -> None:
    reference, ours = grammars
    assert not _accepts(reference, text)
    assert not _accepts(ours, text)


_ALPHABET = '{}[],:" \n01-9.eE+-tru\\/ufalsn\x01\x7fé'


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=_ALPHABET, max_size=14).map(lambda s: "[" + s))
def test_random_strings_agree(grammars: tuple[object, object], text: str) -> None:
    reference, ours = grammars
    assert _accepts(ours, text) == _accepts(reference, text)


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(), kids, max_size=3),
    max_leaves=8,
)


@settings(max_examples=100, deadline=None)
@given(
    value=st.one_of(st.lists(_json_values, max_size=3), st.dictionaries(st.text(), _json_values)),
    indent=st.sampled_from([None, 0, 2, "\t"]),
    ascii_only=st.booleans(),
)
def test_dumped_json_accepted(
    grammars: tuple[object, object], value: object, indent: object, ascii_only: bool
) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    reference, ours = grammars
    assert _accepts(reference, text)
    assert _accepts(ours, text)


def test_structure() -> None:
    ir = builtin_json_grammar_ir()
    assert isinstance(ir, GrammarIR) and ir.root == "root"
    assert ir is builtin_json_grammar_ir()  # cached
    assert ir == parse_ebnf(BUILTIN_JSON_EBNF)
    # Strings and numbers are inlined: the punctuation after them is read in the same rule.
    assert [r.name for r in ir.rules] == ["root", "members", "elements"]
    g = Grammar.builtin_json_grammar()
    assert g.ir == ir and Grammar.from_ebnf(str(g)) == g
