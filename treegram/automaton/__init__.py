"""Grammar IR to one flat byte-level automaton for all rules."""

from ._build import Automaton, build_automaton

__all__ = ["Automaton", "build_automaton"]
