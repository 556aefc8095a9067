"""Grammar IR to one flat byte-level automaton for all rules."""

from ._build import LOOKAHEAD_SUFFIX, Automaton, build_automaton
from ._repeats import split_long_repeats

__all__ = ["Automaton", "build_automaton", "LOOKAHEAD_SUFFIX", "split_long_repeats"]
