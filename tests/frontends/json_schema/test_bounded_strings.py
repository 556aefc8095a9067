"""``maxLength`` beside a pattern or a format, where a state per length would be too many:
the string's content is a counted rule (:attr:`treegram.ir.Rule.max_string_chars`) and the
matcher bounds the characters it decodes to (``kernels/_earley.py``, ``kernels/_mask.py``).

Oracles: the same schemas compiled with a state per length (the automaton product, which
small bounds still take: ``_strings._PRODUCT_STATES`` forced to 0 sends them to the counted
rule instead), mask by mask along random walks and near the bound, with tokens that split
characters and escapes; the ``jsonschema`` package on whole instances; and the matcher's own
token scans.
"""

from __future__ import annotations

import json
import random

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import treegram
from treegram.errors import GrammarError
from treegram.frontends.json_schema import _strings
from treegram.frontends.json_schema._convert import json_schema_to_ir

WORDS = "^[a-z\u00e9\U0001f600]+(-[a-z]+)*$"
SCHEMAS = {
    "words": {"type": "string", "pattern": WORDS, "maxLength": 7},
    "email": {"type": "string", "format": "email", "maxLength": 9},
    # longer than the longest token: masks far from the bound come from the classes alone
    "long-words": {"type": "string", "pattern": WORDS, "maxLength": 24},
    "min-and-max": {
        "type": "string",
        "pattern": "^[a-c]+(-[a-c]+)*$",
        "minLength": 3,
        "maxLength": 6,
    },
    "object": {
        "type": "object",
        "properties": {
            "a": {"type": "string", "pattern": WORDS, "maxLength": 4},
            "b": {"type": "string", "format": "email", "maxLength": 8},
        },
        "required": ["a", "b"],
        "additionalProperties": False,
    },
    # the bounded e-mail and the free one share a character class, which the counted
    # rule then calls instead of holding its states (an escape is read inside that call)
    # equal counted rules (each with rules of its own for its automaton's states): the
    # builder inlines and determinizes one of them and keeps the limits per bound; the
    # third has another bound
    "twins": {
        "type": "object",
        "properties": {
            "a": {"type": "string", "format": "email", "maxLength": 8},
            "b": {"type": "string", "format": "email", "maxLength": 8},
            "c": {"type": "string", "format": "email", "maxLength": 5},
        },
        "required": ["a", "b", "c"],
        "additionalProperties": False,
    },
    "emails": {
        "type": "object",
        "properties": {
            "a": {"type": "string", "format": "email", "maxLength": 20},
            "b": {"type": "string", "format": "email"},
        },
        "required": ["a", "b"],
        "additionalProperties": False,
    },
    "array": {
        "type": "array",
        "items": {"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$", "maxLength": 3},
        "maxItems": 3,
    },
}


def _vocabulary() -> list[bytes]:
    singles = [bytes([b]) for b in range(32, 127)]
    pieces = [
        "é",
        "\U0001f600",
        "ab",
        "abc",
        "a-b",
        "xyzxyzxyz",  # longer than most bounds: every mask rechecks it
        "ab@",
        "@x.co",
        "\\u00e9",
        "\\u0061",
        "\\ud83d",
        "\\ude00",
        "\\u00",
        "61xyz",  # ends an escape begun before, then reads on
        "1xyz",
        '"',
        '",',
        '"}',
        '"]',
        '", "',
        '{"a": "',
        '"b": "',
        '["',
    ]
    split = [b"\xf0\x9f", b"\x98\x80", b"\xc3", b"\xa9"]  # a character in two tokens
    # enough tokens that end a "\u006" escape and read on for the matcher to classify
    # them in the escape's context (where the classes, which do not count, accept them)
    pieces += [f"1{c}xyz" for c in "abcdefghijklmnopqrstuvwxyz"]
    out = singles + [p.encode() for p in pieces if p.encode() not in singles] + split
    return out + [b"<eos>"]


VOCAB = _vocabulary()
N = len(VOCAB)


@pytest.fixture(scope="module")
def grammars():
    """Per schema: (the product grammar, the counted grammar)."""
    info = treegram.TokenizerInfo(VOCAB, stop_token_ids=[N - 1])
    compiler = treegram.GrammarCompiler(info)
    out = {}
    for name, schema in SCHEMAS.items():
        product, counted = (_with_product_states(n, schema) for n in (10**9, -1))
        assert not any(r.max_string_chars is not None for r in product.rules)
        assert any(r.max_string_chars is not None for r in counted.rules), name
        out[name] = tuple(
            compiler.compile_grammar(treegram.Grammar.from_ir(ir)) for ir in (product, counted)
        )
    return out


def _with_product_states(limit: int, schema: dict):
    """``schema``'s IR with the product limit ``_strings._PRODUCT_STATES`` set to ``limit``
    (a large one: a state per length; -1: counted)."""
    saved = _strings._PRODUCT_STATES
    _strings._PRODUCT_STATES = limit
    try:
        return json_schema_to_ir(schema)
    finally:
        _strings._PRODUCT_STATES = saved


def _allowed(m: treegram.GrammarMatcher, n: int = N) -> list[int]:
    """The tokens of a vocabulary of ``n`` that ``m``'s next mask allows."""
    mask = treegram.allocate_token_bitmask(1, n)
    m.fill_next_token_bitmask(mask)
    bits = np.unpackbits(mask.numpy().view(np.uint8), bitorder="little")[:n]
    return np.flatnonzero(bits).tolist()


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_masks_equal_the_product_along_random_walks(grammars, name):
    product, counted = grammars[name]
    rng = random.Random(name)
    for _ in range(15):
        a, b = treegram.GrammarMatcher(product), treegram.GrammarMatcher(counted)
        for _ in range(30):
            allowed = _allowed(a)
            assert _allowed(b) == allowed
            assert allowed, "a mask with no token: a dead end"
            assert a.is_completed() == b.is_completed()
            if a.is_completed() and rng.random() < 0.2:
                break
            # favour tokens that stay in a string, so that walks reach the bounds
            quotes = [t for t in allowed if b'"' not in VOCAB[t]]
            t = rng.choice(quotes if quotes and rng.random() < 0.85 else allowed)
            assert a.accept_token(t) and b.accept_token(t)
            if a.is_terminated():
                assert b.is_terminated()
                break


def _wide_vocabulary() -> list[bytes]:
    """VOCAB and 3,000 more tokens of string text (letters and hyphens), 2,100 of them 13
    to 40 bytes long: where the margin of a mask's recheck is under 13 bytes (the bounds of
    "words" and "object") more tokens are longer than the mask kernel reads off its
    longest-first list (``kernels._mask._LONG_LIST_MAX``), and it scans the whole sorted
    vocabulary; with the larger bounds of "long-words" and "emails" it reads the list,
    a thousand or more tokens of it far from the bound."""
    rng = random.Random(7)
    seen = set(VOCAB)
    extra: list[bytes] = []
    while len(extra) < 3000:
        n = rng.randint(13, 40) if len(extra) < 2100 else rng.randint(2, 12)
        word = "".join(rng.choice("abcxyz-") for _ in range(n)).encode()
        if word not in seen:
            seen.add(word)
            extra.append(word)
    return VOCAB[:-1] + extra + [b"<eos>"]


@pytest.mark.parametrize("name", ["words", "long-words", "object", "emails"])
def test_masks_equal_the_product_with_many_long_tokens(name):
    vocab = _wide_vocabulary()
    n = len(vocab)
    info = treegram.TokenizerInfo(vocab, stop_token_ids=[n - 1])
    compiler = treegram.GrammarCompiler(info)
    product, counted = (
        compiler.compile_grammar(treegram.Grammar.from_ir(_with_product_states(k, SCHEMAS[name])))
        for k in (10**9, -1)
    )

    rng = random.Random(name)
    for _ in range(10):
        a, b = treegram.GrammarMatcher(product), treegram.GrammarMatcher(counted)
        for _ in range(25):
            want = _allowed(a, n)
            assert _allowed(b, n) == want
            if not want or (a.is_completed() and rng.random() < 0.2):
                break
            quotes = [t for t in want if b'"' not in vocab[t]]
            t = rng.choice(quotes if quotes and rng.random() < 0.85 else want)
            assert a.accept_token(t) and b.accept_token(t)
            if a.is_terminated():
                break


@pytest.mark.parametrize(
    "name, prefix",
    [
        ("words", '"abcdef'),
        ("words", '"ab\\u00e9d-x'),
        ("words", '"\\ud83d\\ude00a-b\\u0061'),
        ("words", '"abc\xc3'),
        # inside an escape (a character's rule) two characters before the bound
        ("long-words", '"' + "a" * 21 + "\\u00"),
        ("long-words", '"' + "a" * 15 + "\\u00"),
        # inside an escape that the e-mail's character rule reads: no item of the counted
        # rule in the top set, only in the set where the escape began
        ("emails", '{"a": "' + "a" * 16 + "\\u006"),
        ("emails", '{"a": "' + "a" * 8 + "\\u006"),
    ],
)
def test_masks_are_the_scans_at_the_bound(grammars, name, prefix):
    _, counted = grammars[name]
    m = treegram.GrammarMatcher(counted)
    data = prefix.encode("latin-1") if "\xc3" in prefix else prefix.encode()
    for byte in data:  # byte by byte: tokens of one byte exist for each
        assert m.accept_token(VOCAB.index(bytes([byte]))), prefix
    allowed = _allowed(m)
    scanned = []
    for t in range(N):
        if m.accept_token(t):
            scanned.append(t)
            m.rollback(1)
    assert allowed == scanned, prefix
    assert allowed


def _validator(schema):
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("name", ["words", "min-and-max", "array"])
@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(alphabet="abcé\U0001f600-xyz", max_size=9), min_size=1, max_size=4))
def test_instances_agree_with_jsonschema(grammars, name, texts):
    _, counted = grammars[name]
    valid = _validator(SCHEMAS[name]).is_valid
    for s in texts:
        inst = texts[:3] if name == "array" else s
        for text in (json.dumps(inst), json.dumps(inst, ensure_ascii=False)):
            m = treegram.GrammarMatcher(counted)
            ok = m.accept_string(text) and m.is_completed()
            assert ok == valid(inst), (name, text)


def test_long_bound_counts_escapes_as_one_character():
    schema = {"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$", "maxLength": 300}
    ir = _with_product_states(-1, schema)
    info = treegram.TokenizerInfo(VOCAB, stop_token_ids=[N - 1])
    cg = treegram.GrammarCompiler(info).compile_grammar(treegram.Grammar.from_ir(ir))

    def accepts(text: str) -> bool:
        m = treegram.GrammarMatcher(cg)
        return m.accept_string(text) and m.is_completed()

    assert accepts('"' + "a" * 300 + '"')
    assert not accepts('"' + "a" * 301 + '"')
    assert accepts('"' + "\\u0061" * 298 + "-b" + '"')  # 1,790 bytes, 300 characters
    assert not accepts('"' + "\\u0061" * 298 + "-bc" + '"')
    # the last characters: after 299, one letter and then only the closing quote
    m = treegram.GrammarMatcher(cg)
    assert m.accept_string('"' + "ab" * 149 + "a")
    allowed = {VOCAB[t] for t in _allowed(m)}
    assert b"b" in allowed and b'"' in allowed and b"ab" not in allowed and b"-" not in allowed
    assert m.accept_string("b")
    allowed = {VOCAB[t] for t in _allowed(m)}
    assert b'"' in allowed and all(v.startswith(b'"') for v in allowed)


def test_batch_and_tree_masks_match_the_scalar_mask(grammars):
    _, counted = grammars["object"]
    prefixes = ['{"a": "ab', '{"a": "abc', '{"a": "é-', '{"a": "ab", "b": "a@b.c']
    matchers = []
    for p in prefixes:
        m = treegram.GrammarMatcher(counted)
        assert m.accept_string(p), p
        matchers.append(m)
    want = [_allowed(m) for m in matchers]
    masks = treegram.allocate_token_bitmask(len(matchers), N)
    treegram.BatchGrammarMatcher().batch_fill_next_token_bitmask(matchers, masks)
    for i in range(len(matchers)):
        bits = np.unpackbits(masks[i].numpy().view(np.uint8), bitorder="little")[:N]
        assert np.flatnonzero(bits).tolist() == want[i], prefixes[i]
    # a chain: the root, then "c" and "d" (the fourth character is past "a"'s bound of 4)
    m = matchers[1]
    rows = treegram.allocate_token_bitmask(3, N)
    ids = {v: i for i, v in enumerate(VOCAB)}
    m.traverse_draft_tree([1, 2, -1], [-1, -1, -1], [0, ids[b"d"], ids[b"e"]], rows)
    first = np.unpackbits(rows[0].numpy().view(np.uint8), bitorder="little")[:N]
    assert np.flatnonzero(first).tolist() == want[1]
    second = np.unpackbits(rows[1].numpy().view(np.uint8), bitorder="little")[:N]
    assert second[ids[b'"']] and not second[ids[b"e"]], "the tree passed the bound"


def test_email_with_a_long_bound_compiles_as_a_counted_rule():
    # MaskBench writes this shape often: a state per length would be ~10^4-10^5 states
    ir = json_schema_to_ir({"type": "string", "format": "email", "maxLength": 1024})
    (rule,) = [r for r in ir.rules if r.max_string_chars is not None]
    assert rule.max_string_chars == 1024
    info = treegram.TokenizerInfo(VOCAB, stop_token_ids=[N - 1])
    cg = treegram.GrammarCompiler(info).compile_grammar(treegram.Grammar.from_ir(ir))
    m = treegram.GrammarMatcher(cg)
    assert m.accept_string('"a@b.co"') and m.is_completed()
    assert not treegram.GrammarMatcher(cg).accept_string('"a"b')


def test_counted_rule_prints_and_survives_serialization(grammars):
    _, counted = grammars["words"]
    text = counted.grammar.to_ebnf()
    assert "[max_string_chars=7]" in text
    bounds = [r.max_string_chars for r in treegram.Grammar.from_ebnf(text).ir.rules]
    assert 7 in bounds
    for loaded in (
        treegram.CompiledGrammar.deserialize(counted.serialize(), counted.tokenizer_info),
        treegram.CompiledGrammar.deserialize_json(counted.serialize_json(), counted.tokenizer_info),
    ):
        m = treegram.GrammarMatcher(loaded)
        assert m.accept_string('"abcdefg"') and m.is_completed()
        assert not treegram.GrammarMatcher(loaded).accept_string('"abcdefgh')


def test_counted_rule_from_ebnf():
    g = treegram.Grammar.from_ebnf(
        'root ::= "\\"" s "\\""\ns[max_string_chars=3] ::= [a-z]+ ("-" [a-z]+)*'
    )
    info = treegram.TokenizerInfo(VOCAB, stop_token_ids=[N - 1])
    compiler = treegram.GrammarCompiler(info)
    cg = compiler.compile_grammar(g)
    for text, ok in (('"a-b"', True), ('"abc"', True), ('"ab-c"', False), ('"abcd"', False)):
        m = treegram.GrammarMatcher(cg)
        assert (m.accept_string(text) and m.is_completed()) == ok, text
    with pytest.raises(GrammarError, match="max_string_chars"):
        compiler.compile_grammar(
            treegram.Grammar.from_ebnf('root ::= s\ns[max_string_chars=3] ::= "(" s ")" | "x"')
        )
    with pytest.raises(GrammarError, match="max_string_chars"):
        compiler.compile_grammar(
            treegram.Grammar.from_ebnf('root ::= s\ns[max_string_chars=3] ::= "\\\\u12"')
        )
