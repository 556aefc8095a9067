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

import functools

from treegram.frontends.json_schema._context import ConversionContext
from treegram.frontends.json_schema._dfa_expr import WRITABLE
from treegram.frontends.json_schema._keywords import KEY_SCHEMAS
from treegram.frontends.json_schema._string_dfa import (
    StringConstraintError,
    pattern_dfa,
    string_dfa,
)
from treegram.ir import Dfa, DfaLimitError

__all__ = ["KeySpace", "MAX_ATOMS", "undeclared_keys"]

# Non-empty combinations of matching patterns compiled for one object.
MAX_ATOMS = 64


# Key languages kept (see undeclared_keys).
_UNDECLARED_CACHE = 256


@functools.lru_cache(maxsize=_UNDECLARED_CACHE)  # errors are raised again, never cached
def undeclared_keys(declared: tuple[str, ...]) -> Dfa:
    """Every writable string but the names ``declared``:
    ``Dfa.all_but(declared, within=WRITABLE)``, kept for the last
    :data:`_UNDECLARED_CACHE` name lists. Automata are immutable, and objects repeat
    their property lists (the same definition inlined under several parents, one schema
    compiled for many requests), each a product and a minimization otherwise."""
    return Dfa.all_but(declared, within=WRITABLE)


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

    Each *keyed* schema applies to every member whose key is in its key language: the
    ``patternProperties`` (the keys containing a match of the pattern) and the internal
    :data:`KEY_SCHEMAS` (a string schema's language, from a negated ``HAS_MEMBER``). A
    key language that cannot be compiled is refused; when the refusal is downgraded, its
    schema is widened to every key it might apply to (see :meth:`keyed_dfas`).
    """

    def __init__(self, conv: ConversionContext, schema: dict, ptr: str, additional) -> None:
        self.conv, self.ptr, self.additional = conv, ptr, additional
        self.patterns: dict = schema.get("patternProperties", {})
        self.names_schema = schema.get("propertyNames")
        # (keyword for messages, pattern text or key schema, value schema, value pointer)
        self.keyed: list[tuple[str, object, object, str]] = [
            ("patternProperties", pat, sub, f"{ptr}/patternProperties/{_esc(pat)}")
            for pat, sub in self.patterns.items()
        ]
        for i, (keys, sub) in enumerate(schema.get(KEY_SCHEMAS, ())):
            self.keyed.append(("not", keys, sub, f"{ptr}/not/{i}"))
        self._dfas: list[Dfa | None] | None = None

    # -- patterns -----------------------------------------------------------------------
    def keyed_dfas(self) -> list[Dfa | None]:
        """One key language per keyed schema (``None``: refused in ``warn`` mode; the
        schema then joins the schema of every undeclared key as an alternative)."""
        if self._dfas is None:
            self._dfas = []
            for keyword, source, sub, vptr in self.keyed:
                try:
                    if isinstance(source, str):
                        self._dfas.append(pattern_dfa(source))
                    else:
                        dfa = string_dfa(source, self.conv, vptr)
                        if dfa is None:
                            raise StringConstraintError(
                                keyword, "a key language outside the string keywords"
                            )
                        self._dfas.append(dfa)
                except (StringConstraintError, DfaLimitError) as exc:
                    where = vptr if keyword == "patternProperties" else self.ptr
                    self.conv.unsupported(keyword, where, str(exc))
                    self._dfas.append(None)
                    # widened: a key it might apply to takes its schema or the other one
                    if self.additional is not True:
                        self.additional = {"anyOf": [self.additional, sub]}
        return self._dfas

    def matching(self, name: str) -> list[tuple[str, object]]:
        """``(value pointer, schema)`` of every keyed schema that applies to ``name``."""
        if not self.keyed:
            return []
        return [
            (vptr, sub)
            for (_, _, sub, vptr), dfa in zip(self.keyed, self.keyed_dfas(), strict=True)
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
        vptr = found[0][0]
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

    def atoms(
        self, declared: list[str], writable: bool = False
    ) -> list[tuple[Dfa, object, str, bool]] | None:
        """``(key language, value schema, value pointer, matched by a pattern)`` for the
        undeclared keys; ``None`` when ``propertyNames`` is outside the DFA subset (the
        caller falls back). With ``writable``, each language is taken without the strings
        that hold a lone surrogate (``lang.intersect(WRITABLE)``, what a JSON string
        literal of it is built from, see ``dfa_string_expr``): the keys of an object
        without patterns or ``propertyNames`` are then every writable string but the
        declared names in one product instead of two."""
        plain = declared and self.names_schema is None
        if writable and plain and all(d is None for d in self.keyed_dfas()):
            # no pattern splits the keys: every writable string but the declared names,
            # one product with the names' trie
            if self.additional is False:
                return []
            lang = undeclared_keys(tuple(declared))
            return [(lang, self.additional, f"{self.ptr}/additionalProperties", False)]
        atoms = self._atoms(declared)
        if atoms is None or not writable:
            return atoms
        return [(lang.intersect(WRITABLE), *rest) for lang, *rest in atoms]

    def _atoms(self, declared: list[str]) -> list[tuple[Dfa, object, str, bool]] | None:
        base = self.names_dfa()
        if base is None:
            return None
        conv = self.conv
        dfas = self.keyed_dfas()
        try:
            if declared:
                if self.names_schema is None:  # base is every string
                    base = Dfa.all_but(declared)
                else:
                    base = base.difference(Dfa.literals(declared))
            parts: list[tuple[Dfa, list[int]]] = [(base, [])] if not base.is_empty() else []
            for i, dfa in enumerate(dfas):
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
                    return self._widened(base, declared)
                parts = nxt
        except DfaLimitError as exc:
            conv.unsupported("patternProperties", f"{self.ptr}/patternProperties", str(exc))
            return self._widened(base, declared)
        out = []
        for lang, hits in parts:
            if not hits:
                if self.additional is not False:
                    out.append((lang, self.additional, f"{self.ptr}/additionalProperties", False))
                continue
            vptr = self.keyed[hits[0]][3]
            subs = [self.keyed[i][2] for i in hits]
            out.append((lang, subs[0] if len(subs) == 1 else {"allOf": subs}, vptr, True))
        return out

    def _widened(self, base: Dfa, declared: list[str]) -> list[tuple[Dfa, object, str, bool]]:
        """After a downgraded refusal: every undeclared key with any of the value schemas
        it might take (a superset of the exact split)."""
        subs = [self.additional] + [sub for _, _, sub, _ in self.keyed]
        if any(s is True for s in subs):
            value: object = True
        else:
            value = {"anyOf": [s for s in subs if s is not False]}
        return [(base, value, f"{self.ptr}/patternProperties", True)]
