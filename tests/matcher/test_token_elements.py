"""Token-id elements (``Token(...)``, ``ExcludeToken(...)``): a grammar element that reads
one whole token by its id, through every matcher API.

The expected masks and results come from xgrammar 0.2.8 (its tests/python/test_token_edge.py
and probes of the real library); the differential walks compare against it directly when
it is installed.
"""

from __future__ import annotations

import numpy as np
import pytest
from matcher_rows import mask_of, snapshot
from xgrammar_diff import probe_alike

from treegram import BatchGrammarMatcher, Grammar, GrammarCompiler, GrammarMatcher, TokenizerInfo
from treegram.compiler import deserialize_compiled, serialize_compiled
from treegram.errors import GrammarError, GrammarSyntaxError
from treegram.matcher import allowed_token_ids, forced_chain

VOCAB = ["<s>", "</s>", "aa", "bb", "cc", "dd"]
STOP = 1


def _compile(grammar: str, vocab=VOCAB, **info_kw):
    info = TokenizerInfo(vocab, **info_kw)
    return GrammarCompiler(info).compile_grammar(grammar)


def _matcher(grammar: str, vocab=VOCAB, **info_kw) -> GrammarMatcher:
    return GrammarMatcher(_compile(grammar, vocab, **info_kw))


def _allowed(m: GrammarMatcher) -> set[int]:
    n = m.compiled_grammar.tokenizer_info.vocab_size
    return set(allowed_token_ids(mask_of(m), n).tolist())


# ---------------------------------------------------------------- accept, mask, terminate


def test_token_set_accepts_its_ids_only():
    m = _matcher("root ::= Token(2, 4)")
    assert _allowed(m) == {2, 4}
    assert not m.accept_token(3)
    assert not m.accept_token(5)
    assert m.accept_token(4)
    assert _allowed(m) == {STOP}
    assert m.accept_token(STOP)
    assert m.is_terminated()


def test_token_then_text_and_text_then_token():
    m = _matcher('root ::= Token(2) "bb"')
    assert _allowed(m) == {2}
    assert m.accept_token(2)
    assert _allowed(m) == {3}  # "bb" by its text
    assert m.accept_token(3)
    assert m.accept_token(STOP) and m.is_terminated()

    m = _matcher('root ::= "aa" Token(4, 5)', vocab=VOCAB)
    assert m.accept_token(2)
    assert _allowed(m) == {4, 5}
    assert m.accept_token(5)
    assert _allowed(m) == {STOP}


def test_token_or_text_both_ways():
    # token 2 by id, token 3 by its text "bb"
    assert _allowed(_matcher('root ::= Token(2) | "bb"')) == {2, 3}
    for tok in (2, 3):
        m = _matcher('root ::= Token(2) | "bb"')
        assert m.accept_token(tok)
        assert m.accept_token(STOP)


def test_a_token_read_both_by_id_and_by_text_keeps_both_parses():
    # token 2 ("aa") is Token(2) followed by "bb", or the first half of "aabb"
    m = _matcher('root ::= (Token(2) "bb") | "aabb" | "aacc"')
    assert m.accept_token(2)
    assert _allowed(m) == {3, 4}


def test_token_set_needs_its_element_at_the_token_boundary():
    # "a" then Token(4): token "ab" would need the token element inside its text
    m = _matcher('r ::= "a"\nroot ::= r Token(4)', vocab=["<s>", "</s>", "ab", "a", "X"])
    assert _allowed(m) == {3}
    assert not m.accept_token(2)


def test_exclude_token_allows_every_other_non_special_token():
    # padding ids past the vocabulary are special: never allowed; the stop token only
    # where the grammar may end
    m = _matcher("root ::= ExcludeToken(2)", vocab_size=40)
    assert _allowed(m) == {0, 3, 4, 5}
    assert not m.accept_token(2)
    assert not m.accept_token(35)
    assert m.accept_token(0)
    assert _allowed(m) == {STOP}


def test_special_and_stop_tokens_never_match_a_token_set():
    vocab = ["<s>", "</s>", "", "aa", "<|im|>"]  # "" is special
    m = _matcher('root ::= Token(2) "aa"', vocab=vocab)
    assert _allowed(m) == set()
    assert not m.accept_token(2)
    m = _matcher('root ::= Token(1) "aa"', vocab=vocab)  # 1 is the stop token
    assert _allowed(m) == set()
    assert not m.accept_token(1)
    m = _matcher("root ::= Token(0, 1, 2, 3, 4)", vocab=vocab)
    assert _allowed(m) == {0, 3, 4}


def test_stop_tokens_of_the_matcher_stay_stops():
    m = _matcher("root ::= ExcludeToken(2)", stop_token_ids=[3])
    assert _allowed(m) == {0, 1, 4, 5}


def test_repeated_token_elements():
    m = _matcher('root ::= (Token(2) | Token(3))* "cc"')
    for tok in (2, 3, 3, 2):
        assert _allowed(m) == {2, 3, 4}
        assert m.accept_token(tok)
    assert m.accept_token(4)
    assert _allowed(m) == {STOP}


def test_jump_forward_reads_text_only():
    # as xgrammar: the forced string follows the text elements and stops before a token
    assert _matcher('root ::= "aa" Token(3) "bb"').find_jump_forward_string() == "aa"
    assert _matcher('root ::= "a" ("a" | Token(3)) "bb"').find_jump_forward_string() == "aabb"
    m = _matcher('root ::= "aa" Token(3) "bb"')
    assert m.accept_token(2) and m.find_jump_forward_string() == ""
    assert m.accept_token(3) and m.find_jump_forward_string() == "bb"


def test_forced_chains_stop_where_a_token_may_be_read_by_id():
    # after "aa" the text alone would force "bbcc"; Token(4) is another way on
    m = _matcher('root ::= "aa" (Token(4) | "bb") "cc"')
    assert forced_chain(m) == [2]
    assert m.accept_token(2)
    assert forced_chain(m) == []
    assert m.accept_token(4)
    assert forced_chain(m) == [4, STOP]  # "cc", then the stop token, the only choice
    m = _matcher('root ::= "aa" "bb" "cc"')
    assert forced_chain(m) == [2, 3, 4, STOP]
    # a token element as the only choice is forced too; beside the stop token it is not
    assert forced_chain(_matcher('root ::= "aa" Token(5) "bb"')) == [2, 5, 3, STOP]
    assert forced_chain(_matcher('root ::= "aa" Token(5)?')) == [2]


# ---------------------------------------------------------------- rollback


ROLLBACK_VOCAB = ["<s>", "</s>", "<tool>", "<code>", "hello", "world", "fn(", ")", "x", "y", ","]
ROLLBACK_GRAMMAR = """
arg ::= [a-z]+
call ::= "fn(" Token(8, 9) "," arg ")"
root ::= (ExcludeToken(2, 3) | Token(2) call)*
"""


def test_rollback_restores_masks_across_token_edges():
    m = _matcher(ROLLBACK_GRAMMAR, vocab=ROLLBACK_VOCAB)
    states = [snapshot(m)]
    for tok in (2, 6, 8, 10):
        assert m.accept_token(tok)
        states.append(snapshot(m))
    assert _allowed(m) == set(range(4, 10)) - {6, 7}  # [a-z]: hello world x y
    m.rollback(4)
    assert snapshot(m) == states[0]
    for k, tok in enumerate((2, 6, 8, 10)):
        assert m.accept_token(tok)
        assert snapshot(m) == states[k + 1]
    m.rollback(2)
    assert snapshot(m) == states[2]
    assert not m.accept_token(10)  # needs Token(8, 9) first
    assert m.accept_token(9)
    assert _allowed(m) == {10}


# ---------------------------------------------------------------- batch and draft trees


def test_batch_apis_match_the_scalar_ones():
    compiled = _compile(ROLLBACK_GRAMMAR, vocab=ROLLBACK_VOCAB)
    scalar = [GrammarMatcher(compiled) for _ in range(3)]
    batch = [GrammarMatcher(compiled) for _ in range(3)]
    bm = BatchGrammarMatcher()
    words = (compiled.tokenizer_info.vocab_size + 31) // 32
    rows = np.zeros((3, words), dtype=np.int32)
    for tokens in ((2, 4, 2), (6, 4, 6), (8, 3, 9), (10, 5, 10)):
        assert bm.batch_accept_token(batch, list(tokens)) == [
            m.accept_token(t) for m, t in zip(scalar, tokens, strict=True)
        ]
        bm.batch_fill_next_token_bitmask(batch, rows)
        for i, m in enumerate(scalar):
            assert np.array_equal(rows[i], mask_of(m))
    bm.batch_rollback(batch, 2)
    for m in scalar:
        m.rollback(2)
    bm.batch_fill_next_token_bitmask(batch, rows)
    for i, m in enumerate(scalar):
        assert np.array_equal(rows[i], mask_of(m))


def _tree():
    # 0 (root) -> 1 "<tool>" -> 2 "fn(" -> 3 "x" (token edge) -> 4 ","
    #                                   -> 5 "hello" (rejected: needs Token(8, 9))
    #          -> 6 "world" (ExcludeToken) -> 7 "<code>" (excluded)
    next_token = np.array([1, 2, 3, 4, -1, -1, 7, -1], dtype=np.int64)
    next_sibling = np.array([-1, 6, -1, 5, -1, -1, -1, -1], dtype=np.int64)
    draft = np.array([0, 2, 6, 8, 10, 4, 5, 3], dtype=np.int64)
    return next_token, next_sibling, draft


def _expected_rows(compiled, draft, paths) -> np.ndarray:
    words = (compiled.tokenizer_info.vocab_size + 31) // 32
    out = np.zeros((len(draft), words), dtype=np.int32)
    for node, path in paths.items():
        m = GrammarMatcher(compiled)
        for t in path:
            assert m.accept_token(int(draft[t]))
        out[node] = mask_of(m)
    return out


def test_draft_tree_walks_follow_token_edges():
    compiled = _compile(ROLLBACK_GRAMMAR, vocab=ROLLBACK_VOCAB)
    next_token, next_sibling, draft = _tree()
    # nodes reached: 0, 1, 2, 3, 4, 6; node 5 and 7 are rejected (their rows stay zero)
    paths = {0: [], 1: [1], 2: [1, 2], 3: [1, 2, 3], 4: [1, 2, 3, 4], 6: [6]}
    expected = _expected_rows(compiled, draft, paths)
    m = GrammarMatcher(compiled)
    before = snapshot(m)
    out = np.full_like(expected, 7)
    assert m.traverse_draft_tree(next_token, next_sibling, draft, out)
    assert np.array_equal(out, expected)
    assert snapshot(m) == before

    ms = [GrammarMatcher(compiled) for _ in range(2)]
    assert ms[1].accept_token(5)  # request 1 starts after one free-text token
    paths1 = {node: [6] + path for node, path in paths.items()}
    drafts = np.stack([draft, draft])
    drafts[1, 0] = 5
    out = np.zeros((2 * len(draft), expected.shape[1]), dtype=np.int32)
    got = BatchGrammarMatcher().batch_traverse_draft_tree(ms, next_token, next_sibling, drafts, out)
    assert got == [True, True]
    assert np.array_equal(out[: len(draft)], expected)
    # request 1 accepted "world" (node 6's token) first: each path starts with node 6
    assert np.array_equal(out[len(draft) :], _expected_rows(compiled, draft, paths1))


def test_captures_read_the_text_of_a_token_read_by_id():
    # a token read by id still spans its bytes: the chart keeps one set per byte
    info = TokenizerInfo(["a", "<|tool|>", "b", "</s>"], stop_token_ids=[3])
    grammar = Grammar.from_lark('start: wrap\nwrap[capture]: "a" <|tool|> "b"')
    m = GrammarMatcher(GrammarCompiler(info).compile_grammar(grammar))
    for tok in (0, 1, 2):
        assert m.accept_token(tok)
    assert m.get_captures() == [("wrap", b"a<|tool|>b")]
    m.rollback(2)
    assert m.accept_token(1) and m.accept_token(2)
    assert m.get_captures() == [("wrap", b"a<|tool|>b")]


# ---------------------------------------------------------------- printing, serialization


def test_token_elements_print_and_parse_back():
    g = Grammar.from_ebnf('root ::= Token(3, 1, 2, 1) "x" | ExcludeToken(9, 2)')
    text = str(g)
    assert "Token(1, 2, 3)" in text and "ExcludeToken(2, 9)" in text
    assert str(Grammar.from_ebnf(text)) == text


def test_serialized_grammar_keeps_its_token_elements():
    compiled = _compile(ROLLBACK_GRAMMAR, vocab=ROLLBACK_VOCAB)
    loaded = deserialize_compiled(serialize_compiled(compiled), compiled.tokenizer_info)
    a, b = GrammarMatcher(compiled), GrammarMatcher(loaded)
    for tok in (2, 6, 9, 10, 4):
        assert snapshot(a) == snapshot(b)
        assert a.accept_token(tok) and b.accept_token(tok)
    assert snapshot(a) == snapshot(b)


def test_exclude_token_without_ids_is_any_token():
    # xgrammar prints ExcludeToken() for "any token" (its parser refuses it; ours reads it)
    m = _matcher('root ::= ExcludeToken() "cc"')
    assert _allowed(m) == {0, 2, 3, 4, 5}
    assert str(m.compiled_grammar.grammar).startswith('root ::= ExcludeToken() "cc"')


# ---------------------------------------------------------------- TokenTagDispatch

TTD_VOCAB = ["<s>", "</s>", "hello", "trig", "content", "blocked", "x"]


@pytest.mark.parametrize(
    ("grammar", "walk"),
    [
        (
            "body ::= Token(4)\nroot ::= TokenTagDispatch((3, body))",
            [((), set(range(7))), ((3,), {4}), ((3, 4), set(range(7))), ((3, 6), None)],
        ),
        (
            "body ::= Token(4)\nroot ::= TokenTagDispatch((3, body), excludes=(5,), "
            "loop_after_dispatch=false)",
            [((), {0, 1, 2, 3, 4, 6}), ((3,), {4}), ((3, 4), {1}), ((3, 4, 2), None)],
        ),
        (
            'body ::= "x"\nroot ::= TokenTagDispatch((3, body), excludes=(5, 2)) "hello"',
            [((), {0, 2, 3, 4, 6}), ((3,), {6}), ((2,), {1}), ((3, 6), {0, 2, 3, 4, 6})],
        ),
        ("root ::= TokenTagDispatch(excludes=(5,))", [((), {0, 1, 2, 3, 4, 6})]),
    ],
)
def test_token_tag_dispatch(grammar, walk):
    # expected sets from xgrammar 0.2.8; None: the last token is rejected
    for tokens, expected in walk:
        m = _matcher(grammar, vocab=TTD_VOCAB)
        ok = all(m.accept_token(t) for t in tokens)
        if expected is None:
            assert not ok
        else:
            assert ok and _allowed(m) == expected


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("grammar", "message"),
    [
        ("root ::= Token()", "requires at least one integer"),
        ("root ::= Token(-1)", "non-negative integers"),
        ("root ::= Token(x)", "non-negative integers"),
        ("root ::= Token(1, 2", "unclosed"),
        ("root ::= Token(1,)", "expected an argument"),
        ("b ::= Token(4)\nroot ::= TokenTagDispatch((3, b), excludes=(3,))", "must not overlap"),
        ('b ::= Token(4)\nroot ::= TokenTagDispatch(("a", b))', "non-negative integer"),
        ("root ::= TokenTagDispatch((3,))", "must be a pair"),
        ("root ::= TokenTagDispatch(foo=1)", "Unknown named argument"),
        ("root ::= TokenTagDispatch(excludes=(-1,))", "non-negative integers"),
    ],
)
def test_malformed_token_elements_are_syntax_errors(grammar, message):
    with pytest.raises(GrammarSyntaxError, match=message):
        Grammar.from_ebnf(grammar)


def test_token_ids_outside_the_vocabulary_are_refused_at_compile():
    g = Grammar.from_ebnf('root ::= Token(2147483647) "c" | ExcludeToken(6)')
    with pytest.raises(GrammarError, match=r"token id 2147483647 .* \[0, 6\)") as err:
        GrammarCompiler(TokenizerInfo(VOCAB)).compile_grammar(g)
    assert isinstance(err.value, RuntimeError) and isinstance(err.value, ValueError)
    with pytest.raises(GrammarError, match=r"token id 6 of ExcludeToken\(6\)"):
        GrammarCompiler(TokenizerInfo(VOCAB)).compile_grammar("root ::= ExcludeToken(6)")
    # the same grammar compiles for a vocabulary that has the id
    GrammarCompiler(TokenizerInfo(VOCAB, vocab_size=7)).compile_grammar("root ::= ExcludeToken(6)")


# ---------------------------------------------------------------- differential


xgr_only = pytest.mark.skipif(
    __import__("importlib").util.find_spec("xgrammar") is None, reason="needs xgrammar"
)

SMALL_VOCAB = ["<s>", "</s>", "a", "b", "ab", "ba", "aa", "<t>", "<e>", "x", "{", "}", ","]
SMALL_GRAMMARS = [
    'root ::= (Token(7) body Token(8) | ExcludeToken(7, 8))*\nbody ::= "{" [ab]* "}"',
    'root ::= "a" (Token(4, 5) | "b")+ ("," Token(2, 9))?',
    'root ::= item ("," item)*\nitem ::= Token(9) | [ab]+ | ExcludeToken(2, 3, 4, 5, 6, 12)',
    'root ::= ("ab" | Token(4))* (Token(11) | "x")',
]


@xgr_only
@pytest.mark.parametrize("grammar", SMALL_GRAMMARS)
def test_masks_match_xgrammar_on_random_walks(grammar):
    xgr = pytest.importorskip("xgrammar")
    ours = GrammarMatcher(_compile(grammar, vocab=SMALL_VOCAB))
    xinfo = xgr.TokenizerInfo(SMALL_VOCAB)
    theirs = xgr.GrammarMatcher(xgr.GrammarCompiler(xinfo).compile_grammar(grammar))
    n = len(SMALL_VOCAB)
    xmask = xgr.allocate_token_bitmask(1, n)
    rng = np.random.default_rng(sum(map(ord, grammar)))
    depth = 0
    for step in range(150):
        theirs.fill_next_token_bitmask(xmask)
        expected = set(allowed_token_ids(xmask.numpy()[0], n).tolist())
        assert _allowed(ours) == expected, f"step {step}"
        assert ours.find_jump_forward_string() == theirs.find_jump_forward_string()
        # every token, allowed or not, is accepted alike
        probe = int(rng.integers(0, n))
        if probe != STOP:
            probe_alike(ours, theirs, probe, step)
        if depth and rng.random() < 0.15:
            ours.rollback(1)
            theirs.rollback(1)
            depth -= 1
            continue
        choices = sorted(expected - {STOP})
        if not choices:
            ours.reset()
            theirs.reset()
            depth = 0
            continue
        tok = int(rng.choice(choices))
        assert ours.accept_token(tok) and theirs.accept_token(tok)
        depth += 1


DEEPSEEK_GRAMMARS = {
    "token_then_text": 'root ::= Token(1000, 2000) "{" [a-z]* "}" Token(0, 1, 2, 3)',
    "exclude_loop": 'root ::= (ExcludeToken(100, 200, 3000) | Token(3000) "x")* "end"',
}


@pytest.fixture(scope="module")
def infos():
    """treegram's and xgrammar's TokenizerInfo for DeepSeek-V4 (skips without xgrammar)."""
    from xgrammar_diff import deepseek_infos

    return deepseek_infos(pytest.importorskip("xgrammar"))


@xgr_only
@pytest.mark.parametrize("name", sorted(DEEPSEEK_GRAMMARS))
def test_masks_match_xgrammar_on_deepseek_v4(infos, name):
    from xgrammar_diff import compare_source

    xgr = pytest.importorskip("xgrammar")
    compare_source(infos, xgr, "compile_grammar", DEEPSEEK_GRAMMARS[name], name, steps=40)
