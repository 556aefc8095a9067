"""Per-rule sampling temperature (xgrammar's ``[temperature=T]`` rule attribute).

The temperature of the next token is the temperature of the rule that will read it: for
every item of the chart's top set that can read a byte, the innermost rule on its call
path that has a temperature (the item's own rule, else the rules that called it, found
through the items of the origin set that called it). A path without one takes the
matcher's ``default_temperature``. When several paths are live (ambiguity, or a rule that
may end or go on), the highest temperature wins, as in xgrammar.

This walks the chart items of the sets on the call paths only (never the vocabulary), and
runs only when a temperature is asked for.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import TemperatureError

__all__ = ["TemperatureTable", "check_default_temperature", "as_temperature_array"]

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
        self.rule_temp = [float(temps.get(name, _NONE)) for name in a.rule_names]
        n = int(a.state_rule.shape[0])
        self.scans = (a.trans.reshape(n, a.n_classes) >= 0).any(axis=1).tolist()
        self.state_rule = a.state_rule.tolist()
        self.ref_ptr = a.ref_ptr.tolist()
        self.ref_rule = a.ref_rule.tolist()
        self.root_rule = int(a.root_rule)

    def temperature(self, items_s, items_o, set_starts, top: int, default: float):
        """``(temperature, conflict)`` of the next token at set ``top``: the highest
        temperature over the live paths (``-1``: none), and whether two paths name
        different rule temperatures."""
        if not self.any:
            return default, False
        lo, hi = int(set_starts[top]), int(set_starts[top + 1])
        found: set[float] = set()
        unset = False
        memo: dict[tuple[int, int], float] = {}
        for j in range(lo, hi):
            s = int(items_s[j])
            if self.scans[s]:
                v = self._value(s, int(items_o[j]), items_s, items_o, set_starts, memo, set())
                if v >= 0:
                    found.add(v)
                else:
                    unset = True
        if not found:
            return default, False
        best = max(found)
        if unset:
            best = max(best, default)
        return best, len(found) > 1

    def _value(self, s, o, items_s, items_o, set_starts, memo, active) -> float:
        t = self.rule_temp[self.state_rule[s]]
        if t >= 0:
            return t
        return self._inherited(self.state_rule[s], o, items_s, items_o, set_starts, memo, active)

    def _inherited(self, rule, o, items_s, items_o, set_starts, memo, active) -> float:
        """The temperature a call of ``rule`` made at set ``o`` runs under (``-1``: none
        on any caller's path)."""
        key = (rule, o)
        got = memo.get(key)
        if got is not None:
            return got
        if key in active:  # a cycle of calls at one position adds no new path
            return _NONE
        active.add(key)
        best = _NONE
        ptr, refs = self.ref_ptr, self.ref_rule
        for j in range(int(set_starts[o]), int(set_starts[o + 1])):
            s = int(items_s[j])
            for e in range(ptr[s], ptr[s + 1]):
                if refs[e] == rule:
                    v = self._value(s, int(items_o[j]), items_s, items_o, set_starts, memo, active)
                    best = max(best, v)
                    break
        active.discard(key)
        memo[key] = best
        return best
