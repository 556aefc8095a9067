"""The grammar IR: the shared bottom layer of every frontend and of the automaton builder.

- the IR nodes (:class:`Bytes`, :class:`CharClass`, :class:`Seq`, :class:`Choice`,
  :class:`Repeat`, :class:`RuleRef`, :class:`Rule`, :class:`GrammarIR`);
- code point ranges (:func:`normalize_ranges`, :func:`complement_ranges`,
  :func:`intersect_ranges`);
- code point DFAs (:class:`Dfa`), for string constraints the IR cannot say in one
  expression;
- the EBNF printer (:func:`grammar_to_ebnf`), the inverse of the EBNF frontend;
- the nesting limits every frontend checks (``MAX_NESTING_DEPTH``, ``MAX_EXPR_DEPTH``) and
  the deep-stack runner (:func:`run_deep`);
- :func:`collector_paused`, the garbage collector paused while a grammar is built.
"""

from treegram.ir._budget import (
    MAX_AUTOMATON_STATES,
    MAX_BUILD_SECONDS,
    MAX_RULE_STATES,
    MAX_SUBSET_MEMBERS,
    UNROLL_LIMIT,
    merge_nested_repeat,
)
from treegram.ir._charset import MAX_STATES, Dfa, DfaLimitError, LoopSplit
from treegram.ir._collector import collector_paused
from treegram.ir._deep import (
    MAX_EXPR_DEPTH,
    MAX_NESTING_DEPTH,
    SHALLOW_DEPTH,
    IrFacts,
    expr_depth,
    expr_depth_error,
    ir_depth,
    ir_facts,
    record_ir_facts,
    run_deep,
    run_sized,
)
from treegram.ir._graphs import cycles_of_two_or_more
from treegram.ir._nodes import (
    MAX_CODEPOINT,
    Bytes,
    CaptureMarker,
    CharClass,
    Choice,
    Expr,
    GrammarIR,
    Repeat,
    Rule,
    RuleRef,
    Seq,
    TokenSet,
    token_rule,
)
from treegram.ir._printer import MACRO_NAMES, NAME_PATTERN, expr_excerpt, grammar_to_ebnf
from treegram.ir._ranges import Ranges, complement_ranges, intersect_ranges, normalize_ranges

__all__ = [
    "MAX_AUTOMATON_STATES",
    "MAX_RULE_STATES",
    "MAX_SUBSET_MEMBERS",
    "MAX_BUILD_SECONDS",
    "UNROLL_LIMIT",
    "merge_nested_repeat",
    "expr_excerpt",
    "Bytes",
    "CharClass",
    "Seq",
    "Choice",
    "Repeat",
    "RuleRef",
    "Expr",
    "Rule",
    "CaptureMarker",
    "GrammarIR",
    "TokenSet",
    "token_rule",
    "MAX_CODEPOINT",
    "Ranges",
    "normalize_ranges",
    "complement_ranges",
    "intersect_ranges",
    "Dfa",
    "DfaLimitError",
    "LoopSplit",
    "MAX_STATES",
    "grammar_to_ebnf",
    "MACRO_NAMES",
    "NAME_PATTERN",
    "MAX_NESTING_DEPTH",
    "MAX_EXPR_DEPTH",
    "SHALLOW_DEPTH",
    "run_deep",
    "run_sized",
    "expr_depth",
    "ir_depth",
    "ir_facts",
    "record_ir_facts",
    "IrFacts",
    "expr_depth_error",
    "cycles_of_two_or_more",
    "collector_paused",
]
