"""Key languages of objects: ``properties``, ``patternProperties``, ``additionalProperties``
and ``propertyNames`` together, exactly, through code point DFAs.

A key that is not declared is split by the set of patterns it matches: each non-empty
*atom* (the keys matching exactly the patterns in a set ``S``) gets one key language and
the value schema ``allOf`` of those patterns' schemas, or ``additionalProperties`` when
``S`` is empty. Declared names are excluded as decoded strings, so a declared name written
with escapes (``"\\u0061"`` for ``"a"``) is not an additional property either. A declared
property whose name matches patterns must satisfy their schemas too.
"""

from __future__ import annotations

from treegram.frontends.json_schema._context import ConversionContext
from treegram.frontends.json_schema._string_dfa import (
    StringConstraintError,
    pattern_dfa,
    string_dfa,
)
from treegram.ir import Dfa, DfaLimitError

__all__ = ["KeySpace", "MAX_ATOMS"]

# Non-empty combinations of matching patterns compiled for one object.
MAX_ATOMS = 64


def _esc(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


class KeySpace:
    """The key/value pairs one object schema allows.

    Parameters
    ----------
    conv : Converter
        The converter (errors, ``$ref`` resolution).
    schema : dict
        The object schema.
    ptr : str
        Its JSON pointer.
    additional : dict or bool
        The schema of keys neither declared nor matching a pattern.
    """

    def __init__(self, conv: ConversionContext, schema: dict, ptr: str, additional) -> None:
        self.conv, self.ptr, self.additional = conv, ptr, additional
        self.patterns: dict = schema.get("patternProperties", {})
        self.names_schema = schema.get("propertyNames")
        self._dfas: list[Dfa | None] | None = None

    # -- patterns -----------------------------------------------------------------------
    def pattern_dfas(self) -> list[Dfa | None]:
        """One DFA per pattern (``None``: refused in ``warn`` mode, the pattern is dropped)."""
        if self._dfas is None:
            self._dfas = []
            for pat in self.patterns:
                try:
                    self._dfas.append(pattern_dfa(pat))
                except StringConstraintError as exc:
                    self.conv.unsupported(
                        "patternProperties", f"{self.ptr}/patternProperties/{_esc(pat)}", str(exc)
                    )
                    self._dfas.append(None)
        return self._dfas

    def matching(self, name: str) -> list[tuple[str, object]]:
        """``(pattern, schema)`` of every pattern that ``name`` matches."""
        if not self.patterns:
            return []
        return [
            (pat, sub)
            for (pat, sub), dfa in zip(self.patterns.items(), self.pattern_dfas(), strict=True)
            if dfa is not None and dfa.accepts(name)
        ]

    def declared_schema(self, name: str, sub):
        """The schema of declared property ``name``: ``sub`` and its matching patterns."""
        extra = [s for _, s in self.matching(name)]
        return {"allOf": [sub, *extra]} if extra else sub

    def undeclared(self, name: str) -> tuple[object, str]:
        """Schema and pointer of the value of an undeclared key ``name``."""
        found = self.matching(name)
        if not found:
            return self.additional, f"{self.ptr}/additionalProperties"
        vptr = f"{self.ptr}/patternProperties/{_esc(found[0][0])}"
        if len(found) == 1:
            return found[0][1], vptr
        return {"allOf": [s for _, s in found]}, vptr

    # -- undeclared keys ----------------------------------------------------------------
    def names_dfa(self) -> Dfa | None:
        """The language of ``propertyNames`` (``None``: outside the DFA subset)."""
        if self.names_schema is None:
            return Dfa.any()
        try:
            return string_dfa(self.names_schema, self.conv, f"{self.ptr}/propertyNames")
        except StringConstraintError as exc:
            self.conv.unsupported("propertyNames", f"{self.ptr}/propertyNames", str(exc))
            return Dfa.any()

    def atoms(self, declared: list[str]) -> list[tuple[Dfa, object, str, bool]] | None:
        """``(key language, value schema, value pointer, matched by a pattern)`` for the
        undeclared keys; ``None``
        when ``propertyNames`` is outside the DFA subset (the caller falls back)."""
        base = self.names_dfa()
        if base is None:
            return None
        conv = self.conv
        try:
            if declared:
                base = base.difference(Dfa.literals(declared))
            parts: list[tuple[Dfa, list[int]]] = [(base, [])] if not base.is_empty() else []
            for i, dfa in enumerate(self.pattern_dfas()):
                if dfa is None:
                    continue
                nxt = []
                for lang, hits in parts:
                    both, rest = lang.intersect(dfa), lang.difference(dfa)
                    if not both.is_empty():
                        nxt.append((both, [*hits, i]))
                    if not rest.is_empty():
                        nxt.append((rest, hits))
                if len(nxt) > MAX_ATOMS:
                    conv.unsupported(
                        "patternProperties",
                        f"{self.ptr}/patternProperties",
                        f"more than {MAX_ATOMS} combinations of overlapping patterns",
                    )
                    break
                parts = nxt
        except DfaLimitError as exc:
            conv.unsupported("patternProperties", f"{self.ptr}/patternProperties", str(exc))
            return []
        out = []
        pats = list(self.patterns.items())
        for lang, hits in parts:
            if not hits:
                if self.additional is not False:
                    out.append((lang, self.additional, f"{self.ptr}/additionalProperties", False))
                continue
            vptr = f"{self.ptr}/patternProperties/{_esc(pats[hits[0]][0])}"
            subs = [pats[i][1] for i in hits]
            out.append((lang, subs[0] if len(subs) == 1 else {"allOf": subs}, vptr, True))
        return out
