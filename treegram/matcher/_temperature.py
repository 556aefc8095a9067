"""Per-rule sampling temperature (xgrammar's ``[temperature=T]`` rule attribute).

The temperature of the next token is the temperature of the rule that will read it: for
every item of the chart's top set that can read a byte, the innermost rule on its call
path that has a temperature (the item's own rule, else the rules that called it, found
through the items of the origin set that called it). When several paths are live
(ambiguity, or a rule that may end or go on), the highest of their rule temperatures wins;
only when no path is inside a temperature rule does the matcher's ``default_temperature``
apply (as in xgrammar, where a higher default does not override a rule's temperature).

This walks the chart items of the sets on the call paths only (never the vocabulary), and
runs only when a temperature is asked for. Calls at one position may call each other
(left recursion, nullable rules), so what each call's context contributes is solved as a
small fixpoint over those calls rather than by recursion.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import TemperatureError
from ._per_grammar import PerGrammar

__all__ = [
    "TemperatureTable",
    "temperature_table",
    "check_default_temperature",
    "as_temperature_array",
]

_NONE = -1.0  # no temperature (the float32 convention of the batch and tree outputs)


def check_default_temperature(value) -> float:
    """``default_temperature`` as a float (``-1.0`` for ``None``).

    Raises
    ------
    TemperatureError
        Not ``None`` and not a finite non-negative number.
    """
    if value is None:
        return _NONE
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TemperatureError(
            "default_temperature must be None or a finite non-negative number, "
            f"got {type(value).__name__}"
        )
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise TemperatureError(
            f"default_temperature must be None or a finite non-negative number, got {value!r}"
        )
    return v


def as_temperature_array(values, name: str = "temperatures") -> np.ndarray:
    """A writable 1-D float32 numpy view of ``values`` (a numpy array or a CPU torch
    tensor; writing to the view writes to ``values``).

    Raises
    ------
    TemperatureError
        Another type or dtype, not 1-D, not on the CPU, or read-only.
    """
    kind = type(values)
    if kind.__module__.startswith("torch"):
        if values.device.type != "cpu":
            raise TemperatureError(f"{name} tensor must be on the CPU, got {values.device}")
        if str(values.dtype) != "torch.float32":
            raise TemperatureError(f"{name} tensor must be float32, got {values.dtype}")
        if values.dim() != 1:
            raise TemperatureError(f"{name} tensor must be 1-D, got shape {tuple(values.shape)}")
        return values.detach().numpy()
    if not isinstance(values, np.ndarray):
        raise TemperatureError(
            f"{name} tensor must be a float32 numpy array or CPU torch tensor, got {kind.__name__}"
        )
    if values.dtype != np.float32:
        raise TemperatureError(f"{name} tensor must be float32, got {values.dtype}")
    if values.ndim != 1:
        raise TemperatureError(f"{name} tensor must be 1-D, got shape {values.shape}")
    if not values.flags.writeable:
        raise TemperatureError(f"{name} tensor must be writable")
    return values


class TemperatureTable:
    """What the temperature walk needs of one compiled grammar: the temperature of each
    automaton rule (``-1``: none) and whether each state reads a byte.

    Parameters
    ----------
    compiled : CompiledGrammar
        The grammar (its IR gives the rules' temperatures, its automaton the states).
    """

    def __init__(self, compiled) -> None:
        a = compiled.automaton
        temps = {}
        ir = getattr(compiled.grammar, "ir", None)
        if ir is not None:
            temps = {r.name: r.temperature for r in ir.rules if r.temperature is not None}
        self.any = bool(temps)
        if not self.any:  # every query answers the default: nothing else is needed
            return
        self.rule_temp = [float(temps.get(name, _NONE)) for name in a.rule_names]
        n = int(a.state_rule.shape[0])
        self.scans = (a.trans.reshape(n, a.n_classes) >= 0).any(axis=1).tolist()
        self.state_rule = a.state_rule.tolist()
        self.ref_ptr = a.ref_ptr.tolist()
        self.ref_rule = a.ref_rule.tolist()
        self.root_rule = int(a.root_rule)

    def temperature(self, items_s, items_o, set_starts, top: int, default: float):
        """``(temperature, conflict)`` of the next token at set ``top``: the highest rule
        temperature over the live paths, ``default`` when no path is inside a temperature
        rule (``-1``: none), and whether the paths name different temperatures."""
        if not self.any:
            return default, False
        temps: set[float] = set()
        # Calls whose context is needed: (rule, origin set) -> what each caller adds, a
        # temperature or the (rule, origin) of a caller without one.
        deps: dict[tuple[int, int], list] = {}
        todo = []
        for j in range(int(set_starts[top]), int(set_starts[top + 1])):
            s = int(items_s[j])
            if not self.scans[s]:
                continue
            r = self.state_rule[s]
            if self.rule_temp[r] >= 0:
                temps.add(self.rule_temp[r])
            else:
                todo.append((r, int(items_o[j])))
        roots = list(todo)
        while todo:
            key = todo.pop()
            if key in deps:
                continue
            rule, o = key
            adds: list = []
            for j in range(int(set_starts[o]), int(set_starts[o + 1])):
                s = int(items_s[j])
                if any(
                    self.ref_rule[e] == rule for e in range(self.ref_ptr[s], self.ref_ptr[s + 1])
                ):
                    t = self.rule_temp[self.state_rule[s]]
                    if t >= 0:
                        adds.append(t)
                    else:
                        caller = (self.state_rule[s], int(items_o[j]))
                        adds.append(caller)
                        todo.append(caller)
            deps[key] = adds
        # The temperatures reachable from each call, to a fixpoint (calls at one position
        # may call each other); lower origins first.
        found: dict[tuple[int, int], frozenset[float]] = {k: frozenset() for k in deps}
        order = sorted(deps, key=lambda k: k[1])
        changed = True
        while changed:
            changed = False
            for k in order:
                ts = found[k]
                for add in deps[k]:
                    ts = ts | ({add} if isinstance(add, float) else found[add])
                if ts != found[k]:
                    found[k] = ts
                    changed = True
        for k in roots:
            temps |= found[k]
        if not temps:
            return default, False
        return max(temps), len(temps) > 1


# each compiled grammar's rule temperatures, built once and shared by its matchers
temperature_table: PerGrammar[TemperatureTable] = PerGrammar(TemperatureTable)
