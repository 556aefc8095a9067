"""Token budgets: ``[max_tokens=N]`` on Lark and EBNF rules, enforced by the matcher.

Each scenario walks a token sequence and compares the allowed tokens after every step with
xgrammar 0.2.8 (the oracle); the draft-tree, batch, rollback and fork paths are checked
against the single-matcher walk.
"""

from __future__ import annotations

import numpy as np
import pytest

from treegram import (
    BatchGrammarMatcher,
    Grammar,
    GrammarCompiler,
    GrammarMatcher,
    GrammarSyntaxError,
    TokenizerInfo,
)

VOCAB = ["ab ", "cd", " ", "</t>", "1", "<t>", "x"]
TEXT = "TEXT: /(\\n|.)*/"
BUDGET = 'start: "<t>" r "</t>" ans\nr[max_tokens=2]: /([a-z]* )+/\nans: "1"'

# (lark, tokens accepted one by one; the allowed tokens are compared before each and at
# the end)
SCENARIOS = [
    # an any-text body can end anywhere: after 3 tokens only the way out is allowed
    (f'start: r "<t>"\nr[max_tokens=3]: {TEXT[6:]}', [0, 1, 2, 5]),
    (BUDGET, [5, 0, 0, 3, 4]),
    # mid-word at the deadline: relaxed until the rule can end
    (BUDGET, [5, 1, 1, 2, 3, 4]),
    ('start: "<t>" r "</t>" ans\nr[max_tokens=1]: /([a-z]* )+/\nans: "1"', [5, 1, 6, 6, 2, 3]),
    # every occurrence has its own budget
    ('start: r+ "1"\nr[max_tokens=2]: /[a-z]+ /', [0, 0, 0, 0, 0, 4]),
    ('start: r+ "1"\nr[max_tokens=2]: /[a-z]+ /', [1, 1, 2, 4]),
    # nested budgets: the smaller deadline wins
    ('start: a "1"\na[max_tokens=3]: "x" b\nb[max_tokens=9]: /([a-z]* )+/', [6, 0, 0, 4]),
    # a lazy head that ends at a marker or closes when its budget is spent
    (f'start: head "1"\nhead[max_tokens=2, lazy]: TEXT "</t>"\n{TEXT}', [0, 1, 4]),
    (f'start: head "1"\nhead[max_tokens=2, lazy]: TEXT "</t>"\n{TEXT}', [0, 3, 4]),
    (f'start: v "1"\nv[max_tokens=2, stop="!"]: TEXT\n{TEXT}', [0, 0, 4]),
]


def _allowed(matcher, vocab_size: int, xgr=None) -> list[int]:
    if xgr is None:
        bitmask = np.zeros((1, (vocab_size + 31) // 32), dtype=np.int32)
    else:
        bitmask = xgr.allocate_token_bitmask(1, vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    row = np.asarray(bitmask)[0]
    return [t for t in range(vocab_size) if (int(row[t >> 5]) >> (t & 31)) & 1]


def _compile(source: str, vocab=VOCAB):
    return GrammarCompiler(TokenizerInfo(vocab), cache_enabled=False).compile_lark(source)


@pytest.mark.parametrize("source, tokens", SCENARIOS, ids=[str(i) for i in range(len(SCENARIOS))])
def test_masks_match_xgrammar(source: str, tokens: list[int]) -> None:
    xgr = pytest.importorskip("xgrammar")
    info = xgr.TokenizerInfo(VOCAB)
    theirs = xgr.GrammarMatcher(
        xgr.GrammarCompiler(info, cache_enabled=False).compile_lark(source),
        terminate_without_stop_token=True,
    )
    ours = GrammarMatcher(_compile(source), terminate_without_stop_token=True)
    for t in tokens:
        assert _allowed(ours, len(VOCAB)) == _allowed(theirs, len(VOCAB), xgr), t
        assert ours.accept_token(t) and theirs.accept_token(t)
    assert ours.is_terminated() == theirs.is_terminated()
    if not ours.is_terminated():
        assert _allowed(ours, len(VOCAB)) == _allowed(theirs, len(VOCAB), xgr)


def test_a_token_that_starts_before_the_rule_is_not_counted() -> None:
    xgr = pytest.importorskip("xgrammar")
    vocab = [*VOCAB, "<t>ab "]  # 7 reaches from before r into it
    theirs = xgr.GrammarMatcher(
        xgr.GrammarCompiler(xgr.TokenizerInfo(vocab), cache_enabled=False).compile_lark(BUDGET),
        terminate_without_stop_token=True,
    )
    ours = GrammarMatcher(_compile(BUDGET, vocab), terminate_without_stop_token=True)
    for t in (7, 0, 0):
        assert ours.accept_token(t) and theirs.accept_token(t)
        assert _allowed(ours, len(vocab)) == _allowed(theirs, len(vocab), xgr)
    assert _allowed(ours, len(vocab)) == [3]  # "ab ab " after the straddling token: spent


def test_spent_budget_is_enforced_on_accept_and_rolls_back() -> None:
    m = GrammarMatcher(_compile(BUDGET), terminate_without_stop_token=True)
    for t in (5, 0, 0):
        assert m.accept_token(t)
    assert not m.accept_token(0)  # a third token inside r: the budget is spent
    assert _allowed(m, len(VOCAB)) == [3]
    assert m.accept_token(3)
    m.rollback(2)  # back before the second "ab ": one token of budget left
    assert 0 in _allowed(m, len(VOCAB))
    assert m.accept_token(1) and m.accept_token(2)
    assert _allowed(m, len(VOCAB)) == [3]
    twin = m.fork()
    m.reset()
    assert m.accept_token(5) and m.accept_token(0)
    assert {0, 3} <= set(_allowed(m, len(VOCAB)))
    assert _allowed(twin, len(VOCAB)) == [3]


def test_accept_string_is_not_counted() -> None:
    m = GrammarMatcher(_compile(BUDGET), terminate_without_stop_token=True)
    assert m.accept_string("<t>ab ab ab ab ")
    assert 0 in _allowed(m, len(VOCAB))
    assert m.accept_token(0) and m.accept_token(0)
    assert _allowed(m, len(VOCAB)) == [3]


def test_shared_subrule_follows_the_derivation() -> None:
    g = Grammar.from_ebnf(
        'root ::= a " " b\na[max_tokens=1] ::= sub\nb ::= sub\nsub ::= [a-z] sub | [a-z]'
    )
    compiled = GrammarCompiler(TokenizerInfo(VOCAB), cache_enabled=False).compile_grammar(g)
    m = GrammarMatcher(compiled, terminate_without_stop_token=True)
    assert m.accept_token(1)
    assert _allowed(m, len(VOCAB)) == [2]
    assert m.accept_token(2) and m.accept_token(1) and m.accept_token(1) and m.is_completed()


def test_draft_trees_chains_and_batches_close_budgets() -> None:
    compiled = _compile(BUDGET)
    width = 1
    # a chain <t> | ab | ab | </t> | 1: the third node's mask is only "</t>"
    m = GrammarMatcher(compiled, terminate_without_stop_token=True)
    assert m.accept_token(5)
    out = np.zeros((4, width), dtype=np.int32)
    links = np.array([1, 2, 3, -1]), np.full(4, -1)
    assert m.traverse_draft_tree(*links, np.array([5, 0, 0, 3]), out)
    rows = [[t for t in range(7) if (int(r[0]) >> t) & 1] for r in out]
    assert rows == [[0, 1, 2, 6], [0, 1, 2, 3, 6], [3], [4]]
    assert _allowed(m, len(VOCAB)) == [0, 1, 2, 6]  # the matcher is where it was
    chain = np.zeros((4, width), dtype=np.int32)
    assert m.fill_chain_bitmask(np.array([0, 0, 0]), chain) == 2  # the third "ab " is refused
    assert np.array_equal(chain[:3], out[:3])
    # batch: one matcher spent its budget, one is mid-word (relaxed)
    ms = [GrammarMatcher(compiled, terminate_without_stop_token=True) for _ in range(2)]
    for tokens in ([5, 5], [0, 1], [0, 1]):
        BatchGrammarMatcher.batch_accept_token(ms, tokens)
    batch = np.zeros((2, width), dtype=np.int32)
    BatchGrammarMatcher().batch_fill_next_token_bitmask(ms, batch)
    assert [[t for t in range(7) if (int(r[0]) >> t) & 1] for r in batch] == [[3], [0, 1, 2, 6]]
    assert BatchGrammarMatcher.batch_accept_token(ms, [0, 2]) == [False, True]
    BatchGrammarMatcher.batch_rollback(ms, 1)
    assert _allowed(ms[1], len(VOCAB)) == [0, 1, 2, 6]
    trees = np.zeros((2 * 2, width), dtype=np.int32)
    done = BatchGrammarMatcher().batch_traverse_draft_tree(
        ms, np.array([1, -1]), np.array([-1, -1]), np.array([[0, 3], [0, 2]]), trees
    )
    assert done == [True, True]
    # ms[0] after <t> ab: one token left, then "</t>" leads to "1"; ms[1] mid-word, then " "
    # spends its budget: only "</t>"
    assert [int(r[0]) for r in trees] == [0b1001111, 1 << 4, 0b1000111, 1 << 3]


def test_captures_of_closed_rules() -> None:
    compiled = _compile(f'start: r "<t>"\nr[max_tokens=3, capture]: {TEXT[6:]}')
    m = GrammarMatcher(compiled, terminate_without_stop_token=True)
    for t in (0, 1, 2):
        assert m.accept_token(t)
    assert _allowed(m, len(VOCAB)) == [5]
    assert m.get_captures() == [("r", b"ab cd ")]
    assert m.accept_token(5) and m.get_captures() == [("r", b"ab cd ")]
    m.rollback(2)
    assert m.get_captures() == [("r", b"ab cd")]


def test_budget_prints_parses_back_and_caches() -> None:
    grammar = Grammar.from_lark(BUDGET)
    assert "r[max_tokens=2] ::=" in str(grammar)
    cached = GrammarCompiler(TokenizerInfo(VOCAB), cache_enabled=True)
    for candidate in (
        Grammar.from_ebnf(str(grammar)),
        Grammar.deserialize_json(grammar.serialize_json()),
    ):
        assert candidate == grammar
        m = GrammarMatcher(cached.compile_grammar(candidate), terminate_without_stop_token=True)
        for t in (5, 0, 0):
            assert m.accept_token(t)
        assert _allowed(m, len(VOCAB)) == [3]


@pytest.mark.parametrize(
    "source, fragment",
    [
        ('root ::= v\nv[max_tokens=0] ::= "q"', "max_tokens must be between 1 and 2,147,483,647"),
        ('root ::= v\nv[max_tokens=2147483648] ::= "q"', "max_tokens must be between"),
        ('root ::= v\nv[max_tokens=x] ::= "q"', "max_tokens needs a positive integer"),
    ],
)
def test_ebnf_budget_errors(source: str, fragment: str) -> None:
    with pytest.raises(GrammarSyntaxError, match=fragment):
        Grammar.from_ebnf(source)


def test_grammar_forced_nodes_refuse_budgets() -> None:
    from treegram.errors import ArgumentError
    from treegram.matcher import forced_chain

    m = GrammarMatcher(_compile(BUDGET))
    with pytest.raises(ArgumentError, match="token budgets"):
        forced_chain(m)
    plain = GrammarMatcher(_compile('start: "<t>" "1"'))
    assert forced_chain(plain) == [5, 4]


DIFFERENTIAL = {
    "any_text": 'start: "<think>" r "</think>" ans\nr[max_tokens=4]: TEXT\nans: /[0-9]{1,4}/\n'
    + TEXT,
    "words": 'start: item+ "."\nitem[max_tokens=3]: /[a-z ]+,/',
    "nested": 'start: a "."\na[max_tokens=5]: "x" b+\nb[max_tokens=2]: /[a-z]+ /',
    "stop_text": f'start: v "9"\nv[max_tokens=3, stop="!"]: {TEXT[6:]}',
    "dispatch_arg": f'start: tool* tail\ntail: TEXT\nh[lazy]: TEXT "<c>"\ntool: h arg "</c>"\n'
    f"arg[max_tokens=3]: /[0-9a-z ]+/\n{TEXT}",
}


@pytest.mark.parametrize("name", list(DIFFERENTIAL))
def test_masks_match_xgrammar_on_deepseek(name: str) -> None:
    xgr = pytest.importorskip("xgrammar")
    from xgrammar_diff import deepseek_infos, walk_and_compare

    ours_info, theirs_info = deepseek_infos(xgr)
    source = DIFFERENTIAL[name]
    ours = GrammarCompiler(ours_info).compile_lark(source)
    theirs = xgr.GrammarCompiler(theirs_info).compile_lark(source)
    walk_and_compare(ours, theirs, xgr, seed=sum(map(ord, name)), steps=120)


BUDGET_VOCAB = ["<think>", "a", "b", "c", "</", "think>", "a</", "<eos>"]


def _tag_budget(max_tokens):
    from treegram import GrammarCompiler as Compiler

    info = TokenizerInfo(BUDGET_VOCAB, stop_token_ids=[7])
    content = {"type": "any_text", "excludes": ["</think>"], "max_tokens": max_tokens}
    tag = {
        "type": "structural_tag",
        "format": {"type": "tag", "begin": "<think>", "content": content, "end": "</think>"},
    }
    return Compiler(info, cache_enabled=False).compile_structural_tag(tag)


def _walk(compiled, tokens) -> bool:
    m = GrammarMatcher(compiled)
    for t in tokens:
        if t not in _allowed(m, len(BUDGET_VOCAB)) or not m.accept_token(t):
            return False
    return m.is_completed()


def test_structural_tag_any_text_budget() -> None:
    compiled = _tag_budget(2)
    assert _walk(compiled, [0, 1, 2, 4, 5])
    assert _walk(compiled, [0, 1, 6, 5])  # "a</" starts inside the text, then the end
    assert not _walk(compiled, [0, 1, 2, 3, 4, 5])
    assert _walk(_tag_budget(0), [0, 4, 5]) and not _walk(_tag_budget(0), [0, 1, 4, 5])
    assert "max_tokens=2" in str(compiled.grammar)
    with pytest.raises(ValueError, match=r"max_tokens must be a non-negative 32-bit integer"):
        _tag_budget(2**31)
