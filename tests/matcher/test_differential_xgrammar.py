"""Differential masks: treegram vs xgrammar on the real DeepSeek-V4 vocabulary.

Both engines walk the same grammar with the same tokens; at every step the full
next-token bitmasks must be identical bit for bit. Steps pick random allowed tokens
(seeded), interleave random rollbacks, and accept a stop token whenever the grammar can
end and the dice say so (then roll it back). Intentional differences: none; padding bits
past the vocabulary are ignored by both.
"""

from __future__ import annotations

import pytest
from matcher_rows import EXPR_GRAMMAR
from xgrammar_diff import deepseek_infos, walk_and_compare

from treegram import GrammarCompiler

xgr = pytest.importorskip("xgrammar")

GRAMMARS = {
    "builtin_json": None,
    "nested_rules": r"""
root ::= "{" ws pair (ws "," ws pair)* ws "}"
pair ::= key ws ":" ws val
key ::= "\"" [a-z_]+ "\""
val ::= num | key | "[" ws (num (ws "," ws num)*)? ws "]"
num ::= "-"? [0-9]+ ("." [0-9]+)?
ws ::= [ \n]*
""",
    "recursion": EXPR_GRAMMAR,
    "left_recursion": r"""
root ::= list
list ::= list "," item | item
item ::= [a-z]+ | "<" list ">"
""",
    "repetition_ranges": r"""
root ::= "id:" [0-9]{3,5} "-" [A-Z]{2} ("/" [a-z]{1,4}){0,3} "!"?
""",
    "non_ascii_classes": r"""
root ::= (greek | cjk | cyr | " ")+ "。"
greek ::= [α-ω]+
cjk ::= [一-龥]{1,6}
cyr ::= [а-яА-ЯёЁ]+
""",
    "lookahead": r"""
root ::= "[" item ("," item)* "]"
item ::= word (= [,\]])
word ::= [a-z]+ | "\"" [^"\\]* "\""
""",
    "nullable_and_ambiguous": r"""
root ::= a b a "end"
a ::= "x"* | "xy"?
b ::= ("y" | "")  ("z"* | "zz")
""",
}

STEPS_PER_GRAMMAR = 320


@pytest.fixture(scope="module")
def infos():
    ours, theirs = deepseek_infos(xgr)
    assert theirs.decoded_vocab == ours.decoded_vocab
    return ours, theirs


@pytest.mark.parametrize("name", list(GRAMMARS))
def test_masks_identical(infos, name):
    ours_info, theirs_info = infos
    source = GRAMMARS[name]
    ours_c = GrammarCompiler(ours_info)
    theirs_c = xgr.GrammarCompiler(theirs_info)
    if source is None:
        ours = ours_c.compile_builtin_json_grammar()
        theirs = theirs_c.compile_builtin_json_grammar()
    else:
        ours = ours_c.compile_grammar(source)
        theirs = theirs_c.compile_grammar(source)
    walk_and_compare(ours, theirs, xgr, sum(map(ord, name)), STEPS_PER_GRAMMAR)
