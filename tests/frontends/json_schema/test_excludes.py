"""JSON Schema string exclusions (xgrammar's ``JSONSchemaFormat.excludes``): no string the
schema leaves free may contain an excluded text as written. Accept/reject decisions are
compared with xgrammar 0.2.8 and masks on the DeepSeek-V4 vocabulary with xgrammar's."""

from __future__ import annotations

import json

import numpy as np
import pytest
from xgrammar_diff import deepseek_env, text_masks_match

import treegram as tg
from treegram.errors import GrammarError, InvalidStructuralTagError, UnsupportedSchemaError
from treegram.frontends.json_schema import json_schema_to_ir
from treegram.testing import _is_grammar_accept_string

CONTROLS = ["<|open|>", "<|close|>", "<|sep|>"]


def _tag(schema, excludes) -> str:
    fmt = {"type": "json_schema", "json_schema": schema, "excludes": excludes}
    return json.dumps({"type": "structural_tag", "format": fmt})


# (schema, excludes, [(document, accepted)]): the expected answers are xgrammar 0.2.8's.
CASES = [
    (
        {"type": "string"},
        CONTROLS,
        [('"safe"', True), ('"你好🦋"', True), ('"x<|open|>y"', False), ('"<|sep|>"', False)],
    ),
    (
        {"type": "string", "minLength": 1, "maxLength": 16},
        CONTROLS,
        [('"safe"', True), ('"x<|close|>"', False)],
    ),
    (  # written text is matched: escapes spell around an excluded text
        True,
        ["ab", ":", "12", "true"],
        [
            ('{"a":12}', True),
            ("true", True),
            ('["a","b"]', True),
            (r'"\u0061b"', True),
            ('"ab"', False),
            ('":"', False),
            ('"12"', False),
            ('"true"', False),
            ('{"xaby":1}', False),
        ],
    ),
    (
        {"type": "string"},
        ['"'],
        [('""', True), (r'"\u0022"', True), (r'"\""', False)],
    ),
    (
        {"type": "string"},
        ["aba", "bab", "你好"],
        [
            ('"aaba"', False),
            ('"bbab"', False),
            ('"x你好y"', False),
            ('"ab"', True),
            ('"你x好"', True),
        ],
    ),
    (  # a pattern or a known format is the schema's contract: not filtered
        {"type": "string", "pattern": "^a[abc]*z$"},
        ["bc", "cb"],
        [('"aabz"', True), ('"acbz"', True), ('"aab"', False)],
    ),
    (
        {"type": "string", "format": "email"},
        ["bc"],
        [('"bc@example.com"', True), ('"aa"', False)],
    ),
    (  # a format without a language is free
        {"type": "string", "format": "password"},
        ["BAD"],
        [('"safe"', True), ('"xBADy"', False)],
    ),
    (
        {"enum": ["safe", "x<|open|>y", {"text": "BAD"}, {"BAD": 1}, ["BAD"], 42]},
        ["BAD", "<|open|>"],
        [
            ('"safe"', True),
            ("42", True),
            ('"x<|open|>y"', False),
            ('{"text":"BAD"}', False),
            ('{"BAD":1}', False),
            ('["BAD"]', False),
        ],
    ),
    (
        {
            "type": "object",
            "properties": {"bad": {"type": "integer"}, "ok": {"type": "string"}},
            "additionalProperties": False,
        },
        ["bad"],
        [('{"ok":"x"}', True), ("{}", True), ('{"bad":1}', False), ('{"ok":"xbad"}', False)],
    ),
    (
        {
            "type": "object",
            "properties": {"": {"type": "integer"}},
            "additionalProperties": True,
        },
        ["bad"],
        [
            ('{"good":1}', True),
            ('{"bad":1}', False),
            ('{"xbady":1}', False),
            ('{"a":"bad"}', False),
        ],
    ),
    (  # keys under patternProperties are the pattern's
        {
            "type": "object",
            "properties": {"fixed": {"type": "integer"}},
            "patternProperties": {"^[a-z]*$": {"type": "integer"}},
            "additionalProperties": False,
        },
        ["bad"],
        [('{"good":1}', True), ('{"bad":1}', True), ('{"xbady":1}', True)],
    ),
    (
        {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": False,
        },
        CONTROLS,
        [('{"text":"hello"}', True), ('{"text":"a<|sep|>b"}', False)],
    ),
    (
        {"anyOf": [{"const": "BAD"}, {"const": "safe"}]},
        ["BAD"],
        [('"safe"', True), ('"BAD"', False), ('"你"', False)],
    ),
]


@pytest.mark.filterwarnings("ignore:unknown JSON Schema format 'password'")
@pytest.mark.parametrize("index", range(len(CASES)))
def test_excludes_language(index):
    schema, excludes, docs = CASES[index]
    grammar = tg.Grammar.from_structural_tag(_tag(schema, excludes))
    got = [(doc, _is_grammar_accept_string(grammar, doc)) for doc, _ in docs]
    assert got == docs


@pytest.mark.parametrize("index", range(len(CASES)))
def test_excludes_language_matches_xgrammar(index):
    xgr = pytest.importorskip("xgrammar")
    xt = pytest.importorskip("xgrammar.testing")
    schema, excludes, docs = CASES[index]
    theirs = xgr.Grammar.from_structural_tag(_tag(schema, excludes))
    assert [(doc, xt._is_grammar_accept_string(theirs, doc)) for doc, _ in docs] == docs


def test_excludes_apply_per_format_and_default_to_none():
    schema = {"type": "string"}
    fmt = {"type": "json_schema", "json_schema": schema}
    seq = {"type": "sequence", "elements": [{**fmt, "excludes": ["bad"]}, fmt]}
    grammar = tg.Grammar.from_structural_tag({"type": "structural_tag", "format": seq})
    assert _is_grammar_accept_string(grammar, '"safe""bad"')
    assert not _is_grammar_accept_string(grammar, '"bad""safe"')
    compiler = tg.GrammarCompiler(tg.TokenizerInfo(["a", "b"]), cache_enabled=True)
    for excludes, allowed in (([], True), (["bad"], False), (["other"], True), (["bad"], False)):
        compiled = compiler.compile_structural_tag(_tag(schema, excludes))
        assert _is_grammar_accept_string(compiled.grammar, '"bad"') == allowed


def test_length_bounds_stay_exact():
    # A deliberate difference: xgrammar drops minLength/maxLength when texts are excluded
    # (with a warning); treegram keeps them, since the product automaton is small.
    grammar = tg.Grammar.from_structural_tag(
        _tag({"type": "string", "minLength": 2, "maxLength": 3}, ["bc"])
    )
    for text, accepted in (("a", False), ("ab", True), ("abd", True), ("abde", False)):
        assert _is_grammar_accept_string(grammar, json.dumps(text)) == accepted
    assert not _is_grammar_accept_string(grammar, '"abc"')
    assert _is_grammar_accept_string(grammar, r'"\u0061b"')  # an escape counts one character


def test_length_bound_past_the_automaton_limit_is_refused_or_dropped():
    schema = {"type": "string", "maxLength": 20_000}
    with pytest.raises(UnsupportedSchemaError, match="maxLength"):
        json_schema_to_ir(schema, excludes=CONTROLS)
    with pytest.warns(UserWarning, match="maxLength"):
        ir = json_schema_to_ir(schema, excludes=CONTROLS, unsupported="warn")
    grammar = tg.Grammar.from_ir(ir)
    assert _is_grammar_accept_string(grammar, '"safe"')
    assert not _is_grammar_accept_string(grammar, '"<|open|>"')


@pytest.mark.parametrize(
    "schema",
    [{"const": "BAD"}, {"enum": ["BAD"]}, {"type": "object", "required": ["BAD"]}],
)
def test_every_value_excluded_gives_a_grammar_that_accepts_nothing(schema):
    grammar = tg.Grammar.from_structural_tag(_tag(schema, ["BAD"]))
    vocab = ["你", '"BAD"', '"safe"', "{}", "[EOS]"]
    info = tg.TokenizerInfo(vocab, stop_token_ids=[len(vocab) - 1])
    matcher = tg.GrammarMatcher(tg.GrammarCompiler(info).compile_grammar(grammar))
    mask = tg.allocate_token_bitmask(1, len(vocab))
    matcher.fill_next_token_bitmask(mask)
    assert int(np.asarray(mask)[0, 0]) == 0
    assert not matcher.is_completed()
    assert not any(_is_grammar_accept_string(grammar, text) for text in vocab)
    # Without exclusions an empty schema is still an error.
    with pytest.raises(GrammarError, match="admits no JSON value"):
        json_schema_to_ir({"enum": []})


@pytest.mark.parametrize("excludes", [None, "bad", [1], [""], ["ok", ""]])
def test_invalid_excludes(excludes):
    with pytest.raises(InvalidStructuralTagError, match="excludes must be an array of non-empty"):
        tg.Grammar.from_structural_tag(_tag({"type": "string"}, excludes))
    with pytest.raises(GrammarError, match="^excludes must be an array of non-empty strings"):
        json_schema_to_ir({"type": "string"}, excludes=excludes)


@pytest.fixture(scope="module")
def env():
    pytest.importorskip("tokenizers")
    return deepseek_env(pytest.importorskip("xgrammar"))


MASK_CASES = [
    ({"type": "string"}, CONTROLS, ['"hello <|op en|> world"', '"\\u0022<|sep"']),
    (
        {
            "type": "object",
            "properties": {"text": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["text"],
            "additionalProperties": True,
        },
        ["BAD", "</tool>"],
        ['{"text": "fine", "n": 3, "extra": ["a", "BA", "D"]}'],
    ),
]


@pytest.mark.parametrize("index", range(len(MASK_CASES)))
def test_masks_match_xgrammar(env, index):
    schema, excludes, docs = MASK_CASES[index]
    ours = env["tc"].compile_structural_tag(_tag(schema, excludes))
    theirs = env["xc"].compile_structural_tag(_tag(schema, excludes))
    for doc in docs:
        text_masks_match(env, ours, theirs, doc, repr(doc))


def test_filtered_strings_are_shared_rules():
    def rules(n: int) -> int:
        props = {f"p{i}": {"type": "string", "maxLength": 5} for i in range(n)}
        props.update({f"q{i}": {"type": "string"} for i in range(n)})
        schema = {"type": "object", "properties": props, "additionalProperties": False}
        text = str(tg.Grammar.from_structural_tag(_tag(schema, CONTROLS)))
        return sum("string_excl" in line.split("::=")[0] for line in text.splitlines())

    # the filtered strings are built once (a rule per length bounds, one free string),
    # however many properties use them
    assert rules(12) == rules(3) > 0
