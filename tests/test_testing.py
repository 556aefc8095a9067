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


def test_schema_and_regex_text_round_trip():
    schema = {"type": "object", "properties": {"n": {"type": "boolean"}}, "required": ["n"]}
    text = testing._json_schema_to_ebnf(schema, any_whitespace=False)
    assert testing._is_grammar_accept_string(text, '{"n": true}')
    assert not testing._is_grammar_accept_string(text, '{"n":1}')
    assert testing._regex_to_ebnf("a[0-9]+") == 'root ::= "a" [0-9]+\n'
    assert testing._regex_to_ebnf("a[0-9]+", with_rule_name=False) == '"a" [0-9]+'
    grammar = testing._ebnf_to_grammar_no_normalization(testing._regex_to_ebnf("a|bc"))
    assert testing._is_grammar_accept_string(grammar, "bc")
    with pytest.raises(ArgumentError, match="json_format: only 'json'"):
        testing._json_schema_to_ebnf(schema, json_format="qwen_xml")
    with pytest.raises(ArgumentError, match="any_order"):
        testing._json_schema_to_ebnf(schema, any_order=True)
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
