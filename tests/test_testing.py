"""treegram.testing: xgrammar.testing's behaviour-level helpers, checked against xgrammar's
own helpers where both give the same answer by design."""

from __future__ import annotations

import numpy as np
import pytest

import treegram as tg
from treegram import testing
from treegram.errors import ArgumentError, BitmaskError, BitmaskIndexError, GrammarSyntaxError

EBNF = 'root ::= "a" b* | "xyz"\nb ::= [0-9] | "-"'


@pytest.mark.parametrize(
    "text,full,prefix",
    [
        ("a", True, True),
        ("a1-2", True, True),
        ("xyz", True, True),
        ("xy", False, True),
        ("", False, True),
        ("ab", False, False),
        ("xyzz", False, False),
    ],
)
def test_is_grammar_accept_string(text, full, prefix):
    assert testing._is_grammar_accept_string(EBNF, text) is full
    assert testing._is_grammar_accept_string(tg.Grammar.from_ebnf(EBNF), text) is full
    assert testing._is_grammar_accept_string(EBNF, text, require_termination=False) is prefix
    xt = pytest.importorskip("xgrammar.testing")
    assert xt._is_grammar_accept_string(EBNF, text) is full


def test_repeated_and_many_grammars_keep_their_own_answers():
    # the helpers keep the last parsed and compiled grammars: more texts than they keep,
    # each asked twice with others in between, still answer for their own language
    texts = [f'root ::= "k{i}" [0-9]*' for i in range(testing._KEEP + 6)]
    for _ in range(2):
        for i, text in enumerate(texts):
            assert testing._is_grammar_accept_string(text, f"k{i}12")
            assert not testing._is_grammar_accept_string(text, f"k{i + 1}x")
    grammars = [tg.Grammar.from_ebnf(text) for text in texts[:3]]
    for i, grammar in enumerate(grammars * 2):
        assert testing._is_grammar_accept_string(grammar, f"k{i % 3}")
        assert not testing._is_grammar_accept_string(grammar, f"k{(i + 1) % 3}")


def test_schema_and_regex_text_round_trip():
    schema = {"type": "object", "properties": {"n": {"type": "boolean"}}, "required": ["n"]}
    text = testing._json_schema_to_ebnf(schema, any_whitespace=False)
    assert testing._is_grammar_accept_string(text, '{"n": true}')
    assert not testing._is_grammar_accept_string(text, '{"n":1}')
    assert testing._regex_to_ebnf("a[0-9]+") == 'root ::= "a" [0-9]+\n'
    assert testing._regex_to_ebnf("a[0-9]+", with_rule_name=False) == '"a" [0-9]+'
    grammar = testing._ebnf_to_grammar_no_normalization(testing._regex_to_ebnf("a|bc"))
    assert testing._is_grammar_accept_string(grammar, "bc")
    qwen = testing._json_schema_to_ebnf(schema, json_format="qwen_xml")
    assert testing._is_grammar_accept_string(qwen, "<parameter=n> true </parameter>")
    assert not testing._is_grammar_accept_string(qwen, '{"n": true}')
    # strict_mode=False: an absent additionalProperties allows further parameters
    loose = testing._json_schema_to_ebnf(schema, json_format="qwen_xml", strict_mode=False)
    extra = "<parameter=n>true</parameter><parameter=more>x</parameter>"
    assert testing._is_grammar_accept_string(loose, extra)
    assert not testing._is_grammar_accept_string(qwen, extra)
    m3 = testing._json_schema_to_ebnf(schema, json_format="minimax_m3_xml")
    assert testing._is_grammar_accept_string(m3, "]<]minimax[>[<n>true]<]minimax[>[</n>")
    with pytest.raises(tg.InvalidStructuralTagError, match="style must be one of"):
        testing._json_schema_to_ebnf(schema, json_format="yaml")
    any_order = testing._json_schema_to_ebnf(
        {"properties": {"a": {"type": "integer"}, "b": {"type": "null"}}}, any_order=True
    )
    assert testing._is_grammar_accept_string(any_order, '{"b": null, "a": 1}')
    with pytest.raises(GrammarSyntaxError):
        testing._is_grammar_accept_string("root ::= (", "a")


def test_masked_tokens_and_single_token():
    vocab = ["a", "b", "ab", "c", "</s>"]
    info = tg.TokenizerInfo(vocab, stop_token_ids=[4])
    m = testing._get_matcher_from_grammar_and_tokenizer_info('root ::= "ab"', info)
    mask = tg.allocate_token_bitmask(2, info.vocab_size, backend="numpy")
    m.fill_next_token_bitmask(mask, 1)
    assert testing._get_masked_tokens_from_bitmask(mask, info.vocab_size, 1) == [1, 3, 4]
    assert testing._is_single_token_bitmask(mask, info.vocab_size, 1) == (False, -1)
    assert m.accept_string("ab")
    m.fill_next_token_bitmask(mask, 0)
    assert testing._is_single_token_bitmask(mask, info.vocab_size, 0) == (True, 4)
    assert testing._get_masked_tokens_from_bitmask(mask, info.vocab_size) == [0, 1, 2, 3]
    with pytest.raises(BitmaskIndexError):
        testing._get_masked_tokens_from_bitmask(mask, info.vocab_size, 2)
    with pytest.raises(BitmaskError):
        testing._get_masked_tokens_from_bitmask(mask.astype(np.int64), info.vocab_size)


def test_bool_masks_match_xgrammar():
    torch = pytest.importorskip("torch")
    xt = pytest.importorskip("xgrammar.testing")
    rng = np.random.default_rng(3)
    bools = torch.from_numpy(rng.random((3, 45)) < 0.5)
    ours = testing.bool_mask_to_bitmask(bools)
    assert isinstance(ours, torch.Tensor)
    assert torch.equal(ours, xt.bool_mask_to_bitmask(bools))  # padding bits set, as there
    assert torch.equal(testing.bitmask_to_bool_mask(ours, 45), bools)
    assert torch.equal(testing.bitmask_to_bool_mask(ours), xt.bitmask_to_bool_mask(ours))
    as_numpy = testing.bool_mask_to_bitmask(bools.numpy())
    np.testing.assert_array_equal(as_numpy, ours.numpy())
    with pytest.raises(BitmaskError, match="vocab_size must be an int in"):
        testing.bitmask_to_bool_mask(ours, 65)
    with pytest.raises(BitmaskError, match="must be 2-D"):
        testing.bool_mask_to_bitmask(bools[0])


def test_traverse_draft_tree_wrapper():
    info = tg.TokenizerInfo(["a", "b", "</s>"], stop_token_ids=[2])
    m = testing._get_matcher_from_grammar_and_tokenizer_info('root ::= "ab"', info)
    assert m.accept_token(0)
    nt = np.array([1, -1], dtype=np.int64)
    ns = np.array([-1, -1], dtype=np.int64)
    draft = np.array([0, 1], dtype=np.int64)
    rows = np.zeros((2, 1), dtype=np.int32)
    assert testing._traverse_draft_tree(nt, ns, draft, m, rows)
    assert rows.tolist() == [[0b010], [0b100]]  # after "a": "b"; after "ab": the stop token


# -- range regexes: checked by brute force against the ranges themselves ----------------------
@pytest.mark.parametrize(
    "start,end",
    [(12, 16), (1, 10), (2134, 3459), (-5, 10), (-15, -10), (-1999, -100), (0, 0), (7, 7)]
    + [(None, None), (5, None), (None, 0), (-5, None), (None, -3), (100, None), (0, None)],
)
def test_generate_range_regex_matches_exactly_the_range(start, end):
    import re

    pattern = re.compile(testing._generate_range_regex(start, end))
    for x in range(-2500, 4000):
        inside = (start is None or x >= start) and (end is None or x <= end)
        assert bool(pattern.match(str(x))) is inside, (x, pattern.pattern)
    for text in ("-0", "01", "+1", "1.0", ""):  # canonical integers only
        assert not pattern.match(text)


def test_generate_range_regex_rejects_bad_ranges():
    with pytest.raises(ArgumentError, match="start must be <= end"):
        testing._generate_range_regex(5, 4)
    with pytest.raises(ArgumentError, match="start must be a number"):
        testing._generate_range_regex(1.5, 4)  # type: ignore[arg-type]


_FLOAT_BOUNDS = [None, 0, 0.5, 1, 1.25, 2.5, -0.5, -1.25, -3, 0.05, 0.1, 0.125, 4.99, 10.5, -100]


def _decimals() -> list[str]:
    fractions = ["0", "00", "1", "05", "5", "25", "2500", "9", "99", "01", "125", "13", "0499"]
    out = []
    for whole in [0, 1, 2, 3, 4, 5, 10, 11, 99, 100, 101]:
        for sign in ("", "-"):
            out.append(f"{sign}{whole}")
            out += [f"{sign}{whole}.{f}" for f in fractions]
    return out


@pytest.mark.parametrize("exclusive", [(False, False), (True, False), (False, True), (True, True)])
def test_generate_float_regex_matches_exactly_the_range(exclusive):
    import re
    from fractions import Fraction

    es, ee = exclusive
    for lo in _FLOAT_BOUNDS:
        for hi in _FLOAT_BOUNDS:
            if lo is not None and hi is not None and (lo > hi or (lo == hi and (es or ee))):
                continue
            pattern = re.compile(testing._generate_float_regex(lo, hi, es, ee))
            for text in _decimals():
                x = Fraction(text)
                above = lo is None or (x > Fraction(repr(lo)) if es else x >= Fraction(repr(lo)))
                below = hi is None or (x < Fraction(repr(hi)) if ee else x <= Fraction(repr(hi)))
                inside = above and below and not (text.startswith("-") and x == 0)
                assert bool(pattern.match(text)) is inside, (lo, hi, es, ee, text)


def test_generate_float_regex_rejects_empty_ranges():
    with pytest.raises(ArgumentError, match="is empty"):
        testing._generate_float_regex(1.0, 1.0, exclusive_start=True)
    with pytest.raises(ArgumentError, match="must be finite"):
        testing._generate_float_regex(float("inf"), None)


# -- rules, automata and xgrammar's grammar passes ----------------------------------------------
ALLOW_EMPTY = [
    (
        'root ::= rule1 rule2 | "abc"\nrule1 ::= "abc" | ""\nrule2 ::= "def" rule3 | ""\n'
        'rule3 ::= "ghi"\n',
        [0, 1, 2],
    ),  # fmt: skip
    ('root ::= rule1 rule2 [a-z]*\nrule1 ::= "abc" | ""\nrule2 ::= "def" | ""\n', [0, 1, 2]),
    ("root ::= [a]* [b]* rule1\nrule1 ::= [abc]* [def]*\n", [0, 1]),
    # xgrammar numbers the helper rule it makes for "?" too ([1, 2]): treegram has none
    ('root ::= "x" r\nr ::= "y"?\n', [1]),
]


@pytest.mark.parametrize("ebnf,expected", ALLOW_EMPTY)
def test_get_allow_empty_rule_ids(ebnf, expected):
    compiled = tg.GrammarCompiler(tg.TokenizerInfo([])).compile_grammar(ebnf)
    assert testing._get_allow_empty_rule_ids(compiled) == expected
    if "?" in ebnf:
        return
    xgr = pytest.importorskip("xgrammar")
    xt = pytest.importorskip("xgrammar.testing")
    theirs = xgr.GrammarCompiler(xgr.TokenizerInfo([])).compile_grammar(ebnf)
    assert xt._get_allow_empty_rule_ids(theirs) == expected


def test_print_grammar_fsms_lists_every_rule_and_edge():
    grammar = tg.Grammar.from_ebnf('root ::= "ab" r\nr ::= [x-z]')
    text = testing._print_grammar_fsms(grammar)
    assert text.splitlines()[0].startswith("root: start=")
    assert "-[0x61]->" in text and "-[0x62]->" in text
    assert "-<r>->" in text and "-[0x78-0x7a]->" in text
    assert "\nr: start=" in text


def test_is_rule_fsm_accept_string():
    grammar = tg.Grammar.from_ebnf('root ::= "a" r\nr ::= [0-9]+ s\ns ::= "!"')
    assert testing._is_rule_fsm_accept_string(grammar, 1, "12!")
    assert not testing._is_rule_fsm_accept_string(grammar, 1, "a12!")
    assert testing._is_rule_fsm_accept_string(grammar, 2, "!")
    with pytest.raises(ArgumentError, match="rule_id"):
        testing._is_rule_fsm_accept_string(grammar, 3, "!")


def test_grammar_functor_passes_keep_the_language():
    grammar = tg.Grammar.from_ebnf('root ::= "a" r | "b"\nr ::= [0-9]*\nunused ::= "z"')
    for name in (
        "structure_normalizer",
        "rule_inliner",
        "byte_string_fuser",
        "lookahead_assertion_analyzer",
        "grammar_optimizer",
        "fsm_builder",
        "repetition_normalizer",
        "dead_code_eliminator",
    ):
        out = getattr(testing.GrammarFunctor, name)(grammar)
        for text, accepted in (("a12", True), ("b", True), ("a", True), ("z", False)):
            assert testing._is_grammar_accept_string(out, text) is accepted, (name, text)
    pruned = testing.GrammarFunctor.dead_code_eliminator(grammar)
    assert [r.name for r in pruned.ir.rules] == ["root", "r"]
    with pytest.raises(TypeError, match="grammar must be a Grammar"):
        testing.GrammarFunctor.rule_inliner("root ::= 'a'")  # type: ignore[arg-type]
