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

# The public names are listed once, in each module's __all__.
from treegram.ir import _budget, _deep, _graphs, _nodes, _printer, _ranges
from treegram.ir._budget import *  # noqa: F403
from treegram.ir._charset import MAX_STATES, Dfa, DfaLimitError, LoopSplit
from treegram.ir._collector import collector_paused
from treegram.ir._deep import *  # noqa: F403
from treegram.ir._graphs import *  # noqa: F403
from treegram.ir._minimize import sort_unique
from treegram.ir._nodes import *  # noqa: F403
from treegram.ir._printer import *  # noqa: F403
from treegram.ir._ranges import *  # noqa: F403

__all__ = [
    *_budget.__all__,
    *_nodes.__all__,
    *_ranges.__all__,
    "Dfa",
    "DfaLimitError",
    "LoopSplit",
    "MAX_STATES",
    *_printer.__all__,
    *_deep.__all__,
    *_graphs.__all__,
    "collector_paused",
    "sort_unique",
]
