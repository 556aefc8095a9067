"""The text of an ECMA-262 ``pattern`` as a JSON Schema *search*: top-level alternatives
and their ``^``/``$`` anchors (a ``pattern`` matches anywhere in the string unless an
alternative is anchored).
"""

from __future__ import annotations

__all__ = ["ecma_classes", "split_alternatives", "strip_anchors", "has_inner_anchor"]

# ECMA-262's WhiteSpace and LineTerminator: what \s matches (the regex frontend's \s is
# xgrammar's smaller set), and the line terminators '.' does not match.
_SPACE = "\\t-\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
_DOT = "[^\\n\\r\\u2028\\u2029]"


def ecma_classes(pattern: str) -> str:
    """``pattern`` with ``\\s``, ``\\S`` and ``.`` spelled as ECMA-262 defines them (as
    explicit classes the regex frontend reads the same way in any dialect).

    Raises
    ------
    ValueError
        ``\\S`` inside a class (its complement cannot be written there).
    """
    out: list[str] = []
    in_class, i = False, 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt == "s":
                out.append(_SPACE if in_class else f"[{_SPACE}]")
            elif nxt == "S":
                if in_class:
                    raise ValueError(f"\\S inside a character class in pattern {pattern!r}")
                out.append(f"[^{_SPACE}]")
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            out.append(ch)
            if pattern[i + 1 : i + 2] == "^":
                out.append("^")
                i += 1
            i += 1
            continue
        elif ch == ".":
            out.append(_DOT)
            i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def split_alternatives(pattern: str) -> list[str]:
    """Split ``pattern`` at its top-level ``|`` (outside groups, classes and escapes); an
    alternative that is one whole group, ``(...)`` or ``(?:...)``, is split inside too
    (for a search, ``(^a$|b)`` is ``^a$|b``)."""
    parts = []
    for part in _split_top(pattern):
        inner = _group_inside(part)
        parts.extend([part] if inner is None else split_alternatives(inner))
    return parts


def _outside_classes(pattern: str):
    """``(index, char, depth)`` for each character outside escapes and classes; ``depth``
    counts the groups around it (a parenthesis counts as outside its own group)."""
    depth, in_class, i = 0, False, 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        else:
            depth -= ch == ")"
            yield i, ch, depth
            depth += ch == "("
        i += 1


def _split_top(pattern: str) -> list[str]:
    cuts = [i for i, ch, depth in _outside_classes(pattern) if ch == "|" and depth == 0]
    bounds = [-1, *cuts, len(pattern)]
    return [pattern[a + 1 : b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _group_inside(part: str) -> str | None:
    """The inside of ``part`` when it is exactly one capturing or ``(?:`` group."""
    if not part.startswith("(") or part.startswith(("(?=", "(?!", "(?<")):
        return None
    if part.startswith("(?") and not part.startswith("(?:"):
        return None
    for i, ch, depth in _outside_classes(part):
        if ch == ")" and depth == 0:
            if i != len(part) - 1:
                return None  # the group closes before the end (or is quantified)
            return part[3:-1] if part.startswith("(?:") else part[1:-1]
    return None


def strip_anchors(alternative: str) -> tuple[bool, str, bool]:
    left = alternative.startswith("^")
    core = alternative[1:] if left else alternative
    right = False
    if core.endswith("$"):
        backslashes = len(core[:-1]) - len(core[:-1].rstrip("\\"))
        if backslashes % 2 == 0:
            right, core = True, core[:-1]
    return left, core, right


def has_inner_anchor(core: str) -> bool:
    i, in_class = 0, False
    while i < len(core):
        ch = core[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            if core[i + 1 : i + 2] == "^":
                i += 1
        elif ch in "^$":
            return True
        i += 1
    return False
