"""Grammar frontends and the grammar IR.

``MAX_NESTING_DEPTH`` and ``MAX_EXPR_DEPTH`` are the documented nesting limits of every
frontend (see :mod:`treegram.grammar._deep`); inputs past them raise ``GrammarError``.
"""

from treegram.grammar._deep import MAX_EXPR_DEPTH, MAX_NESTING_DEPTH
from treegram.grammar._ebnf import parse_ebnf
from treegram.grammar._grammar import Grammar
from treegram.grammar._ir import (
    MAX_CODEPOINT,
    Bytes,
    CharClass,
    Choice,
    Expr,
    GrammarIR,
    Repeat,
    Rule,
    RuleRef,
    Seq,
)
from treegram.grammar._printer import grammar_to_ebnf

__all__ = [
    "Grammar",
    "parse_ebnf",
    "grammar_to_ebnf",
    "Bytes",
    "CharClass",
    "Seq",
    "Choice",
    "Repeat",
    "RuleRef",
    "Expr",
    "Rule",
    "GrammarIR",
    "MAX_CODEPOINT",
    "MAX_NESTING_DEPTH",
    "MAX_EXPR_DEPTH",
]
