"""Token budgets (xgrammar's ``[max_tokens=N]`` rule attribute).

Each occurrence of a budgeted rule (the rule started at one chart set) may read at most
``N`` tokens: the tokens accepted with :meth:`GrammarMatcher.accept_token` (or a batch
accept) that start at or after the set it started at (as in xgrammar, a token that
starts before the rule and ends inside it is not counted); ``accept_string`` steps are
not counted (budgets constrain generation, not validation). Once an occurrence has spent its
budget and its rule can end at the top set, the matcher *closes* it before the next mask
or token: the items of the top set that continue the occurrence (its own items and the
items of the rules it called) are removed, so only what follows the rule remains, exactly
as if the rule had been written to end there. An occurrence that cannot end yet is left
alone (the budget is relaxed until it can). Nested budgets therefore take the smallest.

Closing edits the top set in place. That is a commitment of the parse, like accepting a
token: it is the same whichever call makes it first (a mask, an accept, a batch call), it
is undone by rolling back past the set, and a closed set stays closed when rollback
returns to it (its budget is spent there too).

An item continues an occurrence when every item that called its rule (at the set where
it started) does; an item with one caller outside is kept (the parse outside needs it).
This walks the chart items of the sets since the occurrence started, only when a budget
is spent, never the vocabulary.
"""

from __future__ import annotations

import numpy as np

from ._per_grammar import PerGrammar

__all__ = ["BudgetTable", "budget_table"]


class BudgetTable:
    """The token budget of each automaton rule and the call edges of each state.

    Parameters
    ----------
    compiled : CompiledGrammar
        The grammar (its IR gives the budgets, its automaton the states).
    """

    def __init__(self, compiled) -> None:
        a = compiled.automaton
        ir = getattr(compiled.grammar, "ir", None)
        budgets = {} if ir is None else {r.name: r.max_tokens for r in ir.rules if r.max_tokens}
        self.any = bool(budgets)
        if not self.any:
            return
        self.rule_budget = [int(budgets.get(n, 0)) for n in a.rule_names]
        self.state_rule = a.state_rule.tolist()
        self.state_final = a.state_final.astype(bool).tolist()
        ptr, rules = a.ref_ptr.tolist(), a.ref_rule.tolist()
        # per state: the rules it calls
        self.calls = [frozenset(rules[ptr[s] : ptr[s + 1]]) for s in range(len(self.state_rule))]

    def spent(self, items_s, items_o, set_starts, top: int, tokens_since):
        """The occurrences ``(rule, origin)`` of the top set whose budget is spent and
        whose rule can end at ``top``; ``tokens_since(origin)`` counts the tokens read
        since ``origin``."""
        lo, hi = int(set_starts[top]), int(set_starts[top + 1])
        found: dict[tuple[int, int], bool] = {}  # occurrence -> can end here
        for s, o in zip(items_s[lo:hi].tolist(), items_o[lo:hi].tolist(), strict=True):
            r = self.state_rule[s]
            if self.rule_budget[r]:
                found[r, o] = found.get((r, o), False) or self.state_final[s]
        return [
            (r, o)
            for (r, o), can_end in found.items()
            if can_end and tokens_since(o) >= self.rule_budget[r]
        ]

    def inside(self, items_s, items_o, set_starts, top: int, rule: int, origin: int) -> np.ndarray:
        """For each item of the top set, whether it continues the occurrence of ``rule``
        started at ``origin`` (see the module docstring)."""
        # only the sets that items (of the top set, then of those sets) started in matter
        needed, todo = {top}, [top]
        while todo:
            k = todo.pop()
            for o in set(items_o[int(set_starts[k]) : int(set_starts[k + 1])].tolist()):
                if origin <= o < k and o not in needed:
                    needed.add(o)
                    todo.append(o)
        flags: dict[int, list[bool]] = {}  # set -> per item: inside
        for k in sorted(needed):
            lo, hi = int(set_starts[k]), int(set_starts[k + 1])
            states = items_s[lo:hi].tolist()
            origins = items_o[lo:hi].tolist()
            mine = [True] * (hi - lo)
            fixed = [False] * (hi - lo)
            for i, (s, o) in enumerate(zip(states, origins, strict=True)):
                if self.state_rule[s] == rule and o == origin:
                    fixed[i] = True
                elif o < origin:
                    mine[i], fixed[i] = False, True
            # callers: items of the set an item started at that call its rule; the ones
            # in this same set are solved as a greatest fixpoint (calls may be cyclic)
            changed = True
            while changed:
                changed = False
                for i, (s, o) in enumerate(zip(states, origins, strict=True)):
                    if fixed[i] or not mine[i]:
                        continue
                    r = self.state_rule[s]
                    if o == k:
                        callers = [
                            mine[c] for c, cs in enumerate(states) if c != i and r in self.calls[cs]
                        ]
                    else:
                        olo = int(set_starts[o])
                        callers = [
                            flags[o][c]
                            for c, cs in enumerate(items_s[olo : int(set_starts[o + 1])].tolist())
                            if r in self.calls[cs]
                        ]
                    if not callers or not all(callers):
                        mine[i] = False
                        changed = True
            flags[k] = mine
        return np.array(flags[top], dtype=bool)


# each compiled grammar's token budgets, built once and shared by its matchers
budget_table: PerGrammar[BudgetTable] = PerGrammar(BudgetTable)
