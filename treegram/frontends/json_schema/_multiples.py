"""``multipleOf`` with any positive value, and its complement, as code point automata.

A decimal number is a multiple of ``m = p/q`` (lowest terms) exactly when it lies in
``(p / 2^a 5^b) Z``, where ``2^a 5^b`` is the part of ``q`` made of tens' prime factors: a
decimal times the rest of ``q`` is an integer only when it was one already. With ``c =
max(a, b)`` and ``P = p 2^(c-a) 5^(c-b)`` that is: ``x * 10^c`` is an integer divisible by
``P``. Reading a number's digits left to right, an automaton tracks the remainder modulo
``P`` of the digits read so far, up to the ``c``-th fraction digit; past it only zeros may
follow, and only when the remainder is zero. ``0.01`` (money) is ``P = 1, c = 2``: at most
two significant fraction digits; ``0.25`` is ``P = 25, c = 2``.

The automaton reads ``-?[0-9]+(\\.[0-9]+)?`` loosely (leading zeros allowed): callers
intersect it with the number syntax and range they write (numbers under ``multipleOf`` are
written without exponent).
"""

from __future__ import annotations

from fractions import Fraction

from treegram.ir import Dfa, DfaLimitError

__all__ = ["MAX_MULTIPLE_STATES", "multiple_parts", "multiples_dfa"]

MAX_MULTIPLE_STATES = 20_000
"""Automaton states a ``multipleOf`` may need (about ``P * (c + 2)``)."""

_MINUS, _POINT, _ZERO = 0x2D, 0x2E, 0x30


def multiple_parts(m) -> tuple[int, int]:
    """``(P, c)`` for the positive number ``m``: multiples are ``N / 10^c`` with ``P | N``."""
    f = Fraction(m) if isinstance(m, int) else Fraction(str(m))
    p, q = f.numerator, f.denominator
    a = b = 0
    while q % 2 == 0:
        q //= 2
        a += 1
    while q % 5 == 0:
        q //= 5
        b += 1
    c = max(a, b)
    return p * 2 ** (c - a) * 5 ** (c - b), c


def multiples_dfa(m) -> Dfa:
    """Decimal numbers (``-?[0-9]+(.[0-9]+)?``, leading zeros allowed) that are multiples
    of the positive number ``m``.

    Raises
    ------
    DfaLimitError
        The automaton would need more than :data:`MAX_MULTIPLE_STATES` states.
    """
    big, c = multiple_parts(m)
    n_states = 3 + big * (c + 2)
    if n_states > MAX_MULTIPLE_STATES:
        raise DfaLimitError(
            f"multipleOf {m} needs {n_states} automaton states, more than {MAX_MULTIPLE_STATES}"
        )

    # 0: start, 1: after '-', 2: zeros past the c-th fraction digit (remainder 0);
    # then per remainder r: the integer part, and the fraction after j = 0..c digits.
    def integer(r: int) -> int:
        return 3 + r * (c + 2)

    def fraction(r: int, j: int) -> int:
        return 3 + r * (c + 2) + 1 + j

    trans: list[list[tuple[int, int, int]]] = [[] for _ in range(n_states)]
    accept = [False] * n_states
    accept[2] = True
    trans[2] = [(_ZERO, _ZERO, 2)]
    digits = [(_ZERO + d, _ZERO + d, d) for d in range(10)]
    trans[0] = [(_MINUS, _MINUS, 1)] + [(lo, hi, integer(d % big)) for lo, hi, d in digits]
    trans[1] = [(lo, hi, integer(d % big)) for lo, hi, d in digits]
    for r in range(big):
        # a number ending here is r * 10^(c - j) / 10^c: a multiple when P divides that
        accept[integer(r)] = r * 10**c % big == 0
        trans[integer(r)] = [(lo, hi, integer((10 * r + d) % big)) for lo, hi, d in digits]
        trans[integer(r)].insert(0, (_POINT, _POINT, fraction(r, 0)))
        for j in range(c + 1):
            s = fraction(r, j)
            accept[s] = j > 0 and r * 10 ** (c - j) % big == 0
            if j < c:
                trans[s] = [(lo, hi, fraction((10 * r + d) % big, j + 1)) for lo, hi, d in digits]
            elif r == 0:  # past the c-th digit: only zeros, and only when it divides
                trans[s] = [(_ZERO, _ZERO, 2)]
    rows = [tuple(sorted(row)) for row in trans]
    return Dfa(rows, accept).minimize()
