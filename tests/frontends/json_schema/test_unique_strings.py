"""``uniqueItems`` over string items of unbounded arrays: the item is a unique rule
(:attr:`treegram.ir.Rule.unique`) and the matcher refuses a string item equal, decoded,
to an earlier item of the same array (``kernels/_earley.py``).

Oracles: the ``jsonschema`` package on whole instances (with escapes that decode to an
earlier item); the matcher's own token-by-token scans for every mask bit (the masks come
from token classes that must leave every token through a unique rule's end to those scans);
and a random walk over the masks, which must never reach a state with no allowed token
before the instance can end.
"""

from __future__ import annotations

import json
import random

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schema_matching import accepts, byte_compiler, compile_schema

import treegram
from treegram.errors import UnsupportedSchemaError
from treegram.frontends.json_schema._convert import json_schema_to_ir

STRINGS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
SCHEMAS = {
    "strings": STRINGS,
    "min-length": {
        "type": "array",
        "items": {"type": "string", "minLength": 1},
        "uniqueItems": True,
        "minItems": 1,
    },
    "pattern": {
        "type": "array",
        "items": {"type": "string", "pattern": "^[a-z0-9][a-z0-9+._-]+$"},
        "uniqueItems": True,
    },
    "ref-bounded-count": {
        "$defs": {"tag": {"type": "string"}},
        "type": "array",
        "items": {"$ref": "#/$defs/tag"},
        "maxItems": 3,
        "uniqueItems": True,
    },
    "two-arrays": {  # the same item rule in two arrays of one object: compared apart
        "type": "object",
        "properties": {"a": STRINGS, "b": STRINGS},
        "additionalProperties": False,
    },
    "nested": {"type": "array", "items": STRINGS, "uniqueItems": False},
}

# Escapes that decode to one character, in pairs that are the same string.
SAME = [
    ("a", "\\u0061"),
    ("/", "\\/"),
    ("\U0001f600", "\\ud83d\\ude00"),
    ("\u00e9", "\\u00E9"),
    ("\n", "\\n"),
]


def _validator(schema):
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.lists(st.text(alphabet='ab-+é\U0001f600"\\/', max_size=3), max_size=4),
        min_size=1,
        max_size=3,
    )
)
def test_instances_agree_with_jsonschema(name, lists):
    schema = SCHEMAS[name]
    cg = compile_schema(schema)
    valid = _validator(schema).is_valid
    for items in lists:
        inst = {"a": items, "b": items[::-1]} if name == "two-arrays" else items
        if name == "nested":
            inst = [items, items]
        for text in (json.dumps(inst), json.dumps(inst, ensure_ascii=False)):
            assert accepts(cg, text) == valid(inst), (name, text)


@pytest.mark.parametrize("plain, escaped", SAME)
def test_escaped_repeats_are_repeats(plain, escaped):
    cg = compile_schema(STRINGS)
    raw = json.dumps(plain, ensure_ascii=False)
    assert accepts(cg, f'["{escaped}"]')
    assert not accepts(cg, f'[{raw}, "{escaped}"]')
    assert not accepts(cg, f'["{escaped}", {raw}]')
    assert accepts(cg, f'[{raw}, "x{escaped}"]')


def test_repeat_is_refused_at_its_closing_quote():
    m = treegram.GrammarMatcher(compile_schema(STRINGS))
    assert m.accept_string('["ab", "ab')
    assert not m.accept_string('"')  # the repeat ends here
    assert m.accept_string('c"]') and m.is_completed()


def _vocabulary() -> list[bytes]:
    singles = [bytes([b]) for b in range(32, 127)] + ["é".encode()]
    pieces = ['"', '",', '"]', '", "', '"a"', '"ab"', 'a"', 'ab"', 'b",', "\\u0061", '\\"', '""']
    return singles + [p.encode() for p in pieces if p.encode() not in singles] + [b"<eos>"]


@pytest.fixture(scope="module")
def multi_byte():
    vocab = _vocabulary()
    info = treegram.TokenizerInfo(vocab, stop_token_ids=[len(vocab) - 1])
    compiler = treegram.GrammarCompiler(info)
    return vocab, {
        name: compiler.compile_grammar(treegram.Grammar.from_ir(json_schema_to_ir(s)))
        for name, s in SCHEMAS.items()
    }


def _allowed(m: treegram.GrammarMatcher, n_tokens: int) -> list[int]:
    mask = treegram.allocate_token_bitmask(1, n_tokens)
    m.fill_next_token_bitmask(mask)
    bits = np.unpackbits(mask.numpy().view(np.uint8), bitorder="little")[:n_tokens]
    return np.flatnonzero(bits).tolist()


def _scanned(m: treegram.GrammarMatcher, n_tokens: int) -> list[int]:
    out = []
    for t in range(n_tokens):
        if m.accept_token(t):
            out.append(t)
            m.rollback(1)
    return out


@pytest.mark.parametrize("name", ["strings", "min-length", "pattern", "two-arrays"])
def test_masks_are_the_scans_and_never_dead_end(multi_byte, name):
    vocab, grammars = multi_byte
    rng = random.Random(name)
    for _ in range(12):
        m = treegram.GrammarMatcher(grammars[name])
        for _ in range(40):
            allowed = _allowed(m, len(vocab))
            assert allowed == _scanned(m, len(vocab))
            assert allowed, "a mask with no token: the walk reached a dead end"
            if m.is_completed() and rng.random() < 0.3:
                break
            # favour the tokens that end items, so that repeats are tried often
            quoting = [t for t in allowed if b'"' in vocab[t]]
            t = rng.choice(quoting if quoting and rng.random() < 0.6 else allowed)
            assert m.accept_token(t)
            if m.is_terminated():
                break


def test_batch_and_tree_masks_match_the_scalar_mask(multi_byte):
    vocab, grammars = multi_byte
    n = len(vocab)
    ids = {v: i for i, v in enumerate(vocab)}
    prefixes = ['["ab", "a', '["ab", ', '["a", "b", "', '["\\u0061", ']
    matchers = []
    for p in prefixes:
        m = treegram.GrammarMatcher(grammars["strings"])
        assert m.accept_string(p)
        matchers.append(m)
    want = [_allowed(m, n) for m in matchers]
    batch = treegram.BatchGrammarMatcher()
    masks = treegram.allocate_token_bitmask(len(matchers), n)
    batch.batch_fill_next_token_bitmask(matchers, masks)
    for i in range(len(matchers)):
        bits = np.unpackbits(masks[i].numpy().view(np.uint8), bitorder="little")[:n]
        assert np.flatnonzero(bits).tolist() == want[i]
    # a chain tree: the root, then the tokens b, " (a repeat of "ab" after '["ab", "a')
    m = matchers[0]
    tree_tokens = [0, ids[b"b"], ids[b'"']]
    rows = treegram.allocate_token_bitmask(3, n)
    m.traverse_draft_tree([1, 2, -1], [-1, -1, -1], tree_tokens, rows)
    first = np.flatnonzero(np.unpackbits(rows[0].numpy().view(np.uint8), bitorder="little")[:n])
    assert first.tolist() == want[0]
    second = np.unpackbits(rows[1].numpy().view(np.uint8), bitorder="little")[:n]
    assert not second[ids[b'"']], "the tree allowed the closing quote of a repeat"
    assert second[ids[b"c"]]


def test_items_with_bounded_strings_are_still_refused():
    schema = {"type": "array", "items": {"type": "string", "maxLength": 4}, "uniqueItems": True}
    with pytest.raises(UnsupportedSchemaError, match="uniqueItems"):
        json_schema_to_ir(schema)


def test_unique_rule_prints_and_survives_serialization():
    ir = json_schema_to_ir(STRINGS)
    assert "[unique]" in treegram.Grammar.from_ir(ir).to_ebnf()
    cg = compile_schema(STRINGS)
    for loaded in (
        treegram.CompiledGrammar.deserialize(cg.serialize(), cg.tokenizer_info),
        treegram.CompiledGrammar.deserialize_json(cg.serialize_json(), cg.tokenizer_info),
    ):
        assert accepts(loaded, '["a", "b"]')
        assert not accepts(loaded, '["a", "a"]')


def test_unique_rule_from_ebnf():
    # a hand-written unique rule: its completions inside one call of the caller differ
    g = treegram.Grammar.from_ebnf(
        'root ::= "[" item ("," item)* "]"\nitem[unique] ::= "\\"" [a-c]* "\\""'
    )
    compiled = byte_compiler().compile_grammar(g)
    assert accepts(compiled, '["a","b",""]')
    assert not accepts(compiled, '["a","b","a"]')
    with pytest.raises(treegram.errors.GrammarError, match="unique"):
        byte_compiler().compile_grammar(
            treegram.Grammar.from_ebnf('root ::= item item\nitem[unique] ::= "a"?')
        )
