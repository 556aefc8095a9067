"""``format: "regex"``: the grammar of ECMA-262 patterns (Unicode mode).

The oracle is ECMAScript itself: ``new RegExp(pattern, "u")`` run by Node.js (skipped where
``node`` is not installed). The ``jsonschema`` package's checker is Python's ``re``, another
dialect (see ``_regex_format``), so it is not the oracle here. The grammar is a documented
subset: it must never accept a pattern the oracle rejects, and must accept every pattern
built from the parts it supports.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schema_matching import accepts, compile_schema

from treegram.frontends.json_schema._convert import UnsupportedSchemaError, json_schema_to_ir

SUITE = Path(__file__).resolve().parents[2] / "data" / "json_schema_test_suite"
FORMAT_DIR = SUITE / "draft2020-12" / "optional" / "format"

_NODE_SCRIPT = """
const lines = require('fs').readFileSync(0, 'utf8').split('\\n').filter(x => x);
const valid = s => { try { new RegExp(s, 'u'); return 1 } catch (e) { return 0 } };
const out = lines.map(l => valid(JSON.parse(l)));
console.log(out.join(''));
"""


def ecma_valid(patterns: list[str]) -> list[bool]:
    """Whether ECMAScript's ``RegExp`` (``u`` flag) accepts each pattern (one node run)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js (the ECMA-262 oracle) is not installed")
    text = "\n".join(json.dumps(p) for p in patterns) + "\n"
    done = subprocess.run(
        [node, "-e", _NODE_SCRIPT], input=text, capture_output=True, text=True, check=True
    )
    flags = done.stdout.strip()
    assert len(flags) == len(patterns)
    return [f == "1" for f in flags]


@pytest.fixture(scope="module")
def grammar():
    return compile_schema({"type": "string", "format": "regex"})


def accepted(cg, pattern: str) -> bool:
    return accepts(cg, json.dumps(pattern))


# Valid in Unicode mode (ECMA-262 22.2.1), by the specification's grammar.
VALID = [
    "",
    "a",
    "abc",
    "é+",
    "([abc])+\\s+$",
    "^a|b$",
    "a|",
    "|",
    "()",
    "(?:)",
    "((a)|(b(c)))*",
    "(?:a|b)+?",
    "(?=a)b",
    "(?!a)b",
    "(?<=a+)b",
    "(?<!a)b",
    "(?<name>x)",
    "(?<$a_1>x)(y)",
    "\\bword\\B",
    "a*?b+?c??",
    "a{3}",
    "a{3}?",
    "a{03}",
    "a{2,}",
    "a{1,2}",
    "a{9,10}",
    "a{12,13}",
    "a{0,0}",
    "a{5,5}",
    "a{100,200}",
    "a{0,007}",
    "[]",
    "[^]",
    "[a-z]",
    "[A-Za-z0-9_-]",
    "[a-]",
    "[-a]",
    "[--/]",
    "[a-c-e]",
    "[\\d-]",
    "[\\-\\]\\\\]",
    "[\\b]",
    "[^\\s\\S]",
    ".",
    "\\d\\D\\s\\S\\w\\W",
    "\\f\\n\\r\\t\\v",
    "\\cA\\cz",
    "\\x41",
    "\\u0041",
    "\\uD83D\\uDE00",
    "\\u{1F600}",
    "\\u{0000000041}",
    "\\u{10FFFF}",
    "\\/\\^\\$\\\\\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|",
    "\\p{L}",
    "\\P{Letter}",
    "\\p{gc=Lu}",
    "\\p{General_Category=Decimal_Number}",
    "[\\p{Nd}\\P{ASCII}]",
    "^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$",
]

# Invalid in Unicode mode.
INVALID = [
    "^(abc]",
    "(",
    ")",
    "a)",
    "]",
    "{",
    "}",
    "a{",
    "a{,5}",
    "a{2,1}",
    "a{10,9}",
    "a{13,12}",
    "a{200,100}",
    "*a",
    "a**",
    "a+*",
    "(?=a)*",
    "(?<=a)+",
    "(?P<name>x)",
    "(?P<n>a)(?P=n)",
    "(?#comment)a",
    "(?i)abc",
    "(?<1a>x)",
    "(?<a>x)(?<a>y)",
    "\\",
    "a\\",
    "\\a",
    "\\e",
    "\\-",
    "\\c1",
    "\\c",
    "\\x4",
    "\\u12",
    "\\u{}",
    "\\u{110000}",
    "\\1",
    "\\k<n>",
    "\\p{Foo}",
    "\\p{gc=Any}",
    "\\p{L",
    "[z-a]",
    "[a--]",
    "[\\d-a]",
    "[a-\\d]",
    "[\\B]",
    "[",
    "[a",
    "[]]",
]

# Valid, but outside the subset the grammar accepts (see _regex_format's docstring).
OUTSIDE_SUBSET = [
    "(a)\\1",
    "(?<n>a)\\k<n>",
    "(?<a>x)(?<b>y)",
    "\\0",
    "\\p{Script=Greek}",
    "a{100,150}",
    "a{01,2}",
    "[é-ü]",
    "[\\x00-\\x1f]",
]


def test_the_tables_agree_with_ecmascript():
    assert ecma_valid(VALID) == [True] * len(VALID)
    assert ecma_valid(INVALID) == [False] * len(INVALID)
    assert ecma_valid(OUTSIDE_SUBSET) == [True] * len(OUTSIDE_SUBSET)


@pytest.mark.parametrize("pattern", VALID)
def test_valid_patterns_are_accepted(grammar, pattern):
    assert accepted(grammar, pattern)


@pytest.mark.parametrize("pattern", INVALID)
def test_invalid_patterns_are_rejected(grammar, pattern):
    assert not accepted(grammar, pattern)


@pytest.mark.parametrize("pattern", OUTSIDE_SUBSET)
def test_patterns_outside_the_subset_are_rejected(grammar, pattern):
    assert not accepted(grammar, pattern)


def test_every_json_spelling_of_a_pattern_is_one_pattern(grammar):
    assert accepts(grammar, '"\\u005cd+"')  # \d+ with its backslash escaped as \u005c
    assert accepts(grammar, '"a\\/b"')  # a/b
    assert accepts(grammar, '"\\\\/"')  # \/
    assert not accepts(grammar, '"\\u005c"')  # a lone backslash
    assert not accepts(grammar, '"\\\\"')


def test_property_escapes_agree_with_ecmascript(grammar):
    from treegram.frontends.json_schema._pattern import _CATEGORIES

    names = [*_CATEGORIES, "Any", "ASCII", "Assigned", "White_Space"]
    names += [f"gc={n}" for n in _CATEGORIES] + [f"General_Category={n}" for n in _CATEGORIES]
    patterns = [f"\\p{{{n}}}" for n in names] + [f"[\\P{{{n}}}]" for n in names]
    assert ecma_valid(patterns) == [True] * len(patterns)
    assert [p for p in patterns if not accepted(grammar, p)] == []
    others = ["gc=Any", "General_Category=ASCII", "Letters", "l", "gc=", "sc=Latn", "Lowercase"]
    patterns = [f"\\p{{{n}}}" for n in others]
    wrong = [
        p
        for p, ok in zip(patterns, ecma_valid(patterns), strict=True)
        if accepted(grammar, p) and not ok
    ]
    assert wrong == []


# -- random patterns ----------------------------------------------------------------------

_SOUP = st.text(alphabet="ab(?:=!<>)|[^-]{1,2}*+.$\\dswbBcux0-9AzkpL/é", max_size=10)


_LARGE = [HealthCheck.too_slow, HealthCheck.data_too_large]


@settings(max_examples=30, deadline=None, suppress_health_check=_LARGE)
@given(st.lists(_SOUP, min_size=50, max_size=50))
def test_random_text_is_never_accepted_when_invalid(grammar, texts):
    oracle = ecma_valid(texts)
    wrong = [t for t, ok in zip(texts, oracle, strict=True) if accepted(grammar, t) and not ok]
    assert wrong == []


def _printable(lo: int = 0x20) -> st.SearchStrategy[str]:
    return st.sampled_from([chr(c) for c in range(lo, 0x7F) if chr(c) not in "\\]"])


_class_item = st.one_of(
    st.sampled_from(["a", "Z", "0", "é", "\\d", "\\S", "\\b", "\\-", "\\]", "\\u0041", "\\p{Lu}"]),
    # (a range from "-" right after a single atom would make that atom a range's start)
    _printable()
    .filter(lambda c: c != "-")
    .flatmap(lambda lo: _printable(ord(lo)).map(lambda hi: f"{lo}-{hi}")),
)
_class = st.builds(
    lambda neg, items, dash: "[" + neg + "".join(items) + dash + "]",
    st.sampled_from(["", "^"]),
    st.lists(_class_item, max_size=4),
    st.sampled_from(["", "-"]),
)
_atom = st.one_of(
    st.sampled_from(["a", "b", "é", ".", "\\d", "\\W", "\\n", "\\cJ", "\\x7f", "\\u{1F600}"]),
    st.sampled_from(["\\.", "\\/", "\\(", "\\p{L}", "\\P{Nd}", ",", "-", "=", "<"]),
    _class,
)
_bounds = st.integers(0, 30).flatmap(
    lambda n: st.one_of(
        st.just(f"{{{n}}}"),
        st.just(f"{{{n},}}"),
        st.integers(n, n + 2000).map(lambda m: f"{{{n},{m}}}"),
    )
)
_quantifier = st.builds(
    lambda q, lazy: q + lazy,
    st.one_of(st.sampled_from(["", "*", "+", "?"]), _bounds),
    st.sampled_from(["", "?"]),
)


def _grouped(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    quantified = st.builds(
        lambda g, d, q: g + d + ")" + q, st.sampled_from(["(", "(?:"]), inner, _quantifier
    )
    look = st.builds(
        lambda g, d: g + d + ")", st.sampled_from(["(?=", "(?!", "(?<=", "(?<!"]), inner
    )
    return st.one_of(quantified, look)


def _disjunction(term: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(st.lists(term, max_size=3).map("".join), min_size=1, max_size=3).map("|".join)


_term = st.one_of(
    st.builds(lambda a, q: a + q, _atom, _quantifier), st.sampled_from(["^", "$", "\\b", "\\B"])
)
_plain = st.recursive(
    _disjunction(_term), lambda inner: _disjunction(st.one_of(_term, _grouped(inner))), max_leaves=6
)
_patterns = st.one_of(
    _plain,
    st.builds(lambda a, d, b: a + "(?<name>" + d + ")" + b, _plain, _plain, _plain),
)


@settings(max_examples=30, deadline=None, suppress_health_check=_LARGE)
@given(st.lists(_patterns, min_size=10, max_size=10))
def test_patterns_of_the_subset_are_valid_and_accepted(grammar, patterns):
    assert ecma_valid(patterns) == [True] * len(patterns)
    assert [p for p in patterns if not accepted(grammar, p)] == []


# -- the test suite and schemas -----------------------------------------------------------


@pytest.mark.parametrize("name", ["regex.json", "ecmascript-regex.json"])
def test_suite_cases(name):
    # Every invalid case rejected; a valid one rejected only where it is outside the subset.
    rejected_valid = []
    for group in json.loads((FORMAT_DIR / name).read_text()):
        cg = compile_schema(group["schema"], strict_mode=False)
        for case in group["tests"]:
            ok = accepts(cg, json.dumps(case["data"]))
            assert case["valid"] or not ok, case
            if case["valid"] and not ok:
                rejected_valid.append(case["data"])
    assert [d for d in rejected_valid if d not in OUTSIDE_SUBSET] == []


def test_format_regex_in_a_schema_shares_one_grammar():
    schema = {
        "type": "object",
        "properties": {"a": {"format": "regex"}, "b": {"type": "string", "format": "regex"}},
        "required": ["a"],
    }
    ir = json_schema_to_ir(schema, strict_mode=False)
    assert sum(rule.name.startswith("regex_pattern") for rule in ir.rules) == 1
    cg = compile_schema(schema, strict_mode=False)
    assert accepts(cg, '{"a": "^[a-z]+$", "b": "(x|y)*"}')
    assert accepts(cg, '{"a": 5}')  # format constrains strings only
    assert not accepts(cg, '{"a": "(x"}')
    assert not accepts(cg, '{"a": "x", "b": "[z-a]"}')


def test_beside_other_string_keywords_it_is_refused_or_widened():
    schema = {"type": "string", "format": "regex", "pattern": "^/.+/$"}
    with pytest.raises(UnsupportedSchemaError, match="'format'.*context-free"):
        json_schema_to_ir(schema)
    with pytest.warns(UserWarning, match="format"):
        cg = compile_schema(schema, unsupported="warn")
    assert accepts(cg, '"/a/"')  # widened: a superset of the language


def test_as_an_annotation_it_accepts_any_string():
    cg = compile_schema({"type": "string", "format": "regex"}, format_assertion=False)
    assert accepts(cg, '"(x"')
