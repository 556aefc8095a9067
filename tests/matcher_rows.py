"""Shared helpers of the matcher tests: grammars compiled over a small vocabulary, one
matcher's mask row, a comparable snapshot of its state, and the rows a draft-tree traversal
must give, sized from the matcher's own vocabulary."""

from __future__ import annotations

from typing import Any

import numpy as np

from treegram import GrammarCompiler, GrammarMatcher, TokenizerInfo

# The small vocabulary of the matcher tests: printable ASCII, then tokens that span grammar
# structure (several characters, JSON punctuation and literals) and a stop token.
SMALL_VOCAB: list[str] = [chr(c) for c in range(32, 127)]
SMALL_VOCAB += ["\n", "ab", "abc", '",', '":', "true", "null", "12", "<eos>"]

# Fills output rows before a call: a row still holding it was not written.
SENTINEL = 0x5A5A5A5A

# Grammars several matcher tests walk: arithmetic (recursion through three rules) and a flat
# JSON-like object.
EXPR_GRAMMAR = r"""
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")" | "-" factor
"""
OBJECT_GRAMMAR = r"""
root ::= "{" ws pair (ws "," ws pair)* ws "}"
pair ::= key ws ":" ws val
key ::= "\"" [a-z_]+ "\""
val ::= num | key | "true" | "null"
num ::= "-"? [0-9]+
ws ::= [ \n]*
"""


def compile_each(compiler: Any, grammars: dict[str, str | None]) -> dict[str, Any]:
    """Each grammar compiled by ``compiler`` (treegram's or xgrammar's: the same method
    names); None stands for the built-in JSON grammar."""
    return {
        name: compiler.compile_builtin_json_grammar()
        if text is None
        else compiler.compile_grammar(text)
        for name, text in grammars.items()
    }


def tid(text: str) -> int:
    """The id of ``text`` in SMALL_VOCAB."""
    return SMALL_VOCAB.index(text)


def compile_small(grammars: dict[str, str | None], vocab_size: int) -> dict[str, Any]:
    """Each grammar (see compile_each) compiled by treegram over SMALL_VOCAB padded to
    ``vocab_size`` ids, with ``<eos>`` the stop token."""
    eos = SMALL_VOCAB.index("<eos>")
    info = TokenizerInfo(SMALL_VOCAB, vocab_size=vocab_size, stop_token_ids=[eos])
    return compile_each(GrammarCompiler(info), grammars)


def mask_of(m: GrammarMatcher) -> np.ndarray | None:
    """The current mask row, or None for a matcher that accepted a stop token."""
    if m.is_terminated():
        return None
    words = (m.compiled_grammar.tokenizer_info.vocab_size + 31) // 32
    row = np.zeros((1, words), dtype=np.int32)
    m.fill_next_token_bitmask(row)
    return row[0]


def snapshot(m: GrammarMatcher) -> tuple:
    """Steps, completion, termination and mask bytes: equal exactly for equal states."""
    mask = mask_of(m)
    return (
        m.num_accepted_steps(),
        m.is_completed(),
        m.is_terminated(),
        None if mask is None else mask.tobytes(),
    )


def children_of(parents: np.ndarray) -> list[list[int]]:
    """Each node's children, in index order (``parents[i] < 0`` marks a root)."""
    ch: list[list[int]] = [[] for _ in range(len(parents))]
    for i, p in enumerate(parents):
        if p >= 0:
            ch[int(p)].append(i)
    return ch


def reference_rows(
    m: GrammarMatcher, parents: np.ndarray, tokens: np.ndarray, root: int = 0
) -> np.ndarray:
    """Expected rows of a traversal, from scalar accept / fill / rollback only.

    Follows DESIGN.md "Draft-tree conventions": ``root`` holds the last verified token (its
    row is the current mask); a child is visited only if its parent's row allows its token;
    it is accepted, its row filled unless the matcher stopped, its children visited, and it
    is rolled back. Rows of nodes never reached are zero; the matcher ends where it started.
    """
    vocab_size = m.compiled_grammar.tokenizer_info.vocab_size
    out = np.zeros((len(parents), (vocab_size + 31) // 32), dtype=np.int32)
    children = children_of(parents)
    before = snapshot(m)
    if m.is_terminated():
        return out

    def visit(node: int) -> None:
        m.fill_next_token_bitmask(out, node)
        row = out[node]
        for c in children[node]:
            t = int(tokens[c])
            if not (0 <= t < vocab_size and (int(row[t >> 5]) >> (t & 31)) & 1):
                continue
            assert m.accept_token(t), "a token allowed by the mask must be accepted"
            if not m.is_terminated():
                visit(c)
            m.rollback(1)

    visit(root)
    assert snapshot(m) == before
    return out
