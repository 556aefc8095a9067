"""Capture groups (xgrammar's ``[capture="name"]`` rule attribute).

A completion of a captured rule is an item of the chart whose state is final in that
rule: the item's origin set and the set it sits in are the byte span the rule matched.
The chart already holds every completion of every live parse (Earley sets are only
forgotten by rollback), so :meth:`CaptureTable.events` reads them off the chart up to the
top set, in chart order: by end position, and inside one set in the order the parser
derived them, so an inner rule comes before the rules it completes. Since the parser
follows every parse at once, one occurrence (a captured rule started at one position)
may complete at several end positions; the deduplicated list keeps the longest.

Markers (:class:`~treegram.ir.CaptureMarker`) say which bytes of a completion are a
Lark ``suffix`` / ``stop`` marker: the last N bytes, a given text when present, the N bytes
before the completion (a dynamic dispatch's trigger), or the shortest end that the
marker's automaton matches while the body's matches the rest.

The automaton keeps a captured rule's own states and its calls of itself (it is never
inlined into a caller, and right recursion in it is not turned into a loop), so each
completion stays an item.
"""

from __future__ import annotations

import numpy as np

from ..ir import Choice, Dfa, Repeat, RuleRef, Seq
from ._per_grammar import PerGrammar

__all__ = ["CaptureTable", "capture_table"]


class CaptureTable:
    """The captured and marker-carrying rules of a compiled grammar, and the rule each
    automaton state completes.

    Parameters
    ----------
    compiled : CompiledGrammar
        The grammar (its IR gives the rules' captures and markers, its automaton the
        states).
    """

    def __init__(self, compiled) -> None:
        a = compiled.automaton
        ir = getattr(compiled.grammar, "ir", None)
        tracked = [] if ir is None else [r for r in ir.rules if r.capture or r.marker]
        self.any = bool(tracked)
        if not self.any:
            return
        self.rules = tracked  # (capture, marker) per tracked rule
        # markers of several lengths: the automata that split a completion (body, marker)
        self.splits: dict[int, tuple] = {}
        for i, r in enumerate(tracked):
            if r.marker is not None and r.marker.split is not None:
                self.splits[i] = tuple(
                    Dfa.from_expr(_inlined(ir.rule(name).body, ir)) for name in r.marker.split
                )
        index = {r.name: i for i, r in enumerate(tracked)}
        rule_index = {n: i for i, n in enumerate(a.rule_names)}
        self.rule_ids = [rule_index[r.name] for r in tracked]  # automaton rule of each
        # for stop markers: which rules each state calls, and each state's rule
        self.state_rule = a.state_rule.tolist()
        self.state_final = a.state_final.astype(bool).tolist()
        ptr, called = a.ref_ptr.tolist(), a.ref_rule.tolist()
        self.calls = [frozenset(called[ptr[s] : ptr[s + 1]]) for s in range(len(self.state_rule))]
        rule_track = np.array([index.get(n, -1) for n in a.rule_names], dtype=np.int32)
        # per state: the tracked rule it completes (-1: none)
        self.state_track = np.where(a.state_final, rule_track[a.state_rule], -1).astype(np.int32)

    def events(self, items_s, items_o, set_starts, top: int) -> list[tuple[int, int, int]]:
        """``(tracked rule, start, end)`` of every completion in sets ``0..top``, in
        chart order, each once."""
        end = int(set_starts[top + 1])
        track = self.state_track[items_s[:end]]
        where = np.flatnonzero(track >= 0)
        ends = np.searchsorted(set_starts[: top + 2], where, side="right") - 1
        seen: set[tuple[int, int, int]] = set()
        out = []
        for t, o, k in zip(
            track[where].tolist(), items_o[where].tolist(), ends.tolist(), strict=True
        ):
            if (t, o, k) not in seen:
                seen.add((t, o, k))
                out.append((t, o, k))
        return out

    def captures(
        self,
        items_s,
        items_o,
        set_starts,
        top: int,
        text: bytes | bytearray,
        deduplicate: bool,
        closed: list[tuple[int, int, int]] | None = None,
    ) -> list[tuple[str, bytes]]:
        """``(name, bytes)`` of the completions (``closed``: more of them, as
        ``(tracked rule, start, end)``); with ``deduplicate`` only the longest completion
        of each occurrence, at the place of that completion.

        A rule's own capture leaves out its own marker; a ``stop`` marker is also left
        out of the captures around it whose parse used its rule (:meth:`_within`);
        ``stop_capture`` records the marker.
        """
        events = self.events(items_s, items_o, set_starts, top)
        if closed:
            # completions that closing a spent token budget took out of the chart (in
            # sets up to the top), each before the completions that stayed in its set
            order = sorted(
                [(k, 0, i) for i, (_, _, k) in enumerate(closed)]
                + [(k, 1, i) for i, (_, _, k) in enumerate(events)]
            )
            events = [(closed if src == 0 else events)[i] for _, src, i in order]
        if deduplicate:
            longest: dict[tuple[int, int], int] = {}  # (rule, start) -> event index
            for i, (t, o, k) in enumerate(events):
                j = longest.get((t, o))
                if j is None or events[j][2] < k:
                    longest[t, o] = i
            events = [events[i] for i in sorted(longest.values())]
        spans = [self._marker_span(t, o, k, text) for t, o, k in events]
        stops = [
            (span, event)
            for event, span in zip(events, spans, strict=True)
            if span is not None and self.rules[event[0]].marker.kind == "stop"  # type: ignore[union-attr]
        ]
        chart = (items_s, items_o, set_starts)
        out: list[tuple[str, bytes]] = []
        for (t, o, k), span in zip(events, spans, strict=True):
            rule = self.rules[t]
            if span is not None and rule.marker.capture is not None:  # type: ignore[union-attr]
                out.append((rule.marker.capture, bytes(text[span[0] : span[1]])))  # type: ignore[union-attr]
            if rule.capture is not None:
                if span is not None and not rule.marker.before:  # type: ignore[union-attr]
                    k = span[0]  # the own marker ends the completion
                # the stop markers inside this span that this completion's parse used
                hidden = sorted(
                    sp
                    for sp, (st, so, sk) in stops
                    if o <= sp[0]
                    and sp[1] <= k
                    and (st, so, sk) != (t, o, k)
                    and self._within(chart, self.rule_ids[st], so, sk, self.rule_ids[t], o, k)
                )
                out.append((rule.capture, _without(text, o, k, hidden)))
        return out

    def _within(self, chart, rule: int, o: int, k: int, outer: int, oo: int, ok: int) -> bool:
        """Whether the completion of ``rule`` over sets ``o..k`` is part of a parse of
        the occurrence of ``outer`` started at ``oo`` (ending by ``ok``): some chain of
        rules, each called by the next at the set it started in and completed where the
        next goes on, leads from one to the other."""
        items_s, items_o, set_starts = chart
        todo = [(rule, o, k)]
        seen = {(rule, o)}
        while todo:
            r, start, end = todo.pop()
            lo, hi = int(set_starts[start]), int(set_starts[start + 1])
            for c, co in zip(items_s[lo:hi].tolist(), items_o[lo:hi].tolist(), strict=True):
                if r not in self.calls[c]:
                    continue
                parent = (self.state_rule[c], co)  # an occurrence that called this one
                if parent == (outer, oo):
                    return True
                if parent in seen or co < oo:
                    continue
                seen.add(parent)
                # where the caller completed, from here to the outer completion's end
                for j in range(end, ok + 1):
                    jlo, jhi = int(set_starts[j]), int(set_starts[j + 1])
                    for s2, o2 in zip(
                        items_s[jlo:jhi].tolist(), items_o[jlo:jhi].tolist(), strict=True
                    ):
                        if o2 == co and self.state_final[s2] and self.state_rule[s2] == parent[0]:
                            todo.append((parent[0], co, j))
                            break
        return False

    def _marker_span(
        self, t: int, o: int, k: int, text: bytes | bytearray
    ) -> tuple[int, int] | None:
        m = self.rules[t].marker
        if m is None:
            return None
        if m.split is not None:
            return _split(text, o, k, *self.splits[t])
        if m.text is not None:
            n = len(m.text)
            return (k - n, k) if k - o >= n and text[k - n : k] == m.text else None
        if m.before:
            return (o - m.size, o) if o >= m.size else None
        return (k - m.size, k) if k - o >= m.size else None


def _split(text, o: int, k: int, body, marker) -> tuple[int, int] | None:
    """The span of the shortest end of ``text[o:k]`` that ``marker`` matches while
    ``body`` matches the rest (both code point automata); None if there is none."""
    for x in range(k, o - 1, -1):
        try:
            tail = bytes(text[x:k]).decode("utf-8")
            head = bytes(text[o:x]).decode("utf-8")
        except UnicodeDecodeError:
            continue  # not a character boundary
        if marker.accepts(tail) and body.accepts(head):
            return (x, k)
    return None


def _inlined(expr, ir):
    """``expr`` with rule references replaced by the rules' bodies (the rules a marker
    or a lexical body refers to are terminals: not recursive)."""
    if isinstance(expr, RuleRef):
        return _inlined(ir.rule(expr.name).body, ir)
    if isinstance(expr, (Seq, Choice)):
        return type(expr)(tuple(_inlined(i, ir) for i in expr.items))
    if isinstance(expr, Repeat):
        return Repeat(_inlined(expr.item, ir), expr.min, expr.max)
    return expr


def _without(text: bytes | bytearray, lo: int, hi: int, hidden: list[tuple[int, int]]) -> bytes:
    """``text[lo:hi]`` without the hidden spans that lie inside it."""
    out = bytearray()
    at = lo
    for a, b in hidden:
        if a >= at and b <= hi and a < b:
            out += text[at:a]
            at = b
    out += text[at:hi]
    return bytes(out)


# each compiled grammar's captures, built once and shared by its matchers
capture_table: PerGrammar[CaptureTable] = PerGrammar(CaptureTable)
