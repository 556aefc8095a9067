"""Reference resolution for the JSON Schema frontend: every ``$ref`` made absolute.

A pre-pass over the schema and the given remote documents, before any conversion:

1. *Index*: walk every subschema position (``properties``, ``items``, ``$defs``, ...; not
   data such as ``enum``/``const``, not unknown keywords) computing each subschema's base
   URI from ``$id`` (``id`` in draft 4), and record the resources (``$id``), anchors
   (``$anchor``, ``$dynamicAnchor``, draft-7 ``"$id": "#name"``) and dynamic anchors.
2. *Copy*: rebuild the schemas with every ``$ref`` replaced by one canonical absolute URI
   per target (the target's document URI plus a JSON pointer), so a target reached by
   different spellings shares one rule, and a subschema keeps its meaning when
   ``allOf`` merging moves it elsewhere.

Dialect: drafts 4 to 7 (``$schema`` of the root) ignore a ``$ref``'s sibling keywords, so
the copy keeps the ``$ref`` alone; 2019-09 / 2020-12 (the default) keep the siblings (the
converter merges them). ``$dynamicRef`` is replaced by a ``$ref`` when that is exact: when
its static target has no ``$dynamicAnchor`` of the fragment's name, or when a single
resource in the whole compilation declares that name; otherwise it stays and is refused.

A pointer may lead anywhere in a document (inside an unknown keyword too); such a target
is copied on demand, with the base URI of the nearest enclosing subschema.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote, unquote, urldefrag, urljoin

from treegram.errors import GrammarError

__all__ = ["ROOT_URI", "RefIndex"]

ROOT_URI = "urn:treegram:root"
_SINGLE = (
    "additionalProperties",
    "additionalItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
    "items",
)
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_MAP = (
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
)

Path = tuple  # of str (object keys) and int (array indices)


def _legacy(schema_uri) -> bool:
    """Drafts 3 to 7 (``$ref`` overrides its siblings, ``$id: "#name"`` anchors)."""
    return isinstance(schema_uri, str) and "json-schema.org/draft-0" in schema_uri


def _id_keyword(schema_uri) -> str:
    legacy_id = ("draft-03/", "draft-04/")
    return (
        "id" if isinstance(schema_uri, str) and any(d in schema_uri for d in legacy_id) else "$id"
    )


def _node_dialect(node, path: Path, dialect):
    """The dialect of ``node`` inside a schema of ``dialect``: its own ``$schema`` where it
    is a document or an embedded resource, which the enclosing dialect's identifier keyword
    marks (a draft-4 ``id`` inside a 2020-12 schema is an unknown keyword: the subschema
    is not a resource, and its ``$schema`` is not honoured, as in ``jsonschema``)."""
    if (
        isinstance(node, dict)
        and isinstance(node.get("$schema"), str)
        and (not path or _id_keyword(dialect) in node)
    ):
        return node["$schema"]
    return dialect


def _join(base: str, ref: str) -> str:
    """``ref`` resolved against ``base``; a bare fragment also against a URN base."""
    if ref.startswith("#") or not ref:
        return urldefrag(base)[0] + ref
    return urljoin(base, ref)


def _subschemas(node: dict):
    """``(path step(s), child)`` for every subschema position directly under ``node``."""
    for key, value in node.items():
        if key in _SINGLE and isinstance(value, (dict, bool)):
            yield (key,), value
        elif key in _LIST and isinstance(value, list):
            for i, child in enumerate(value):
                yield (key, i), child
        elif key in _MAP and isinstance(value, dict):
            for name, child in value.items():
                if isinstance(child, (dict, bool)):
                    yield (key, name), child


def encode_pointer(path: Path) -> str:
    """A JSON pointer for ``path``, percent-encoded for a URI fragment."""
    text = "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)
    return quote(text, safe="/~:@!$&'()*+,;=")


class RefIndex:
    """Resources, anchors and rewritten copies of a schema and its remote documents.

    Parameters
    ----------
    root : dict or bool
        The schema.
    remotes : mapping of str to dict or bool, optional
        Documents keyed by their retrieval URI.
    formats : bool, default True
        Keep ``format``; ``False`` leaves it out of every copied subschema (an annotation:
        the ``format_assertion=False`` option).
    """

    def __init__(self, root, remotes: Mapping | None = None, formats: bool = True) -> None:
        self.formats = formats
        schema_uri = root.get("$schema") if isinstance(root, dict) else None
        self.legacy = _legacy(schema_uri)
        self.docs: list = []
        self.doc_uris: list[str] = []
        self.resources: dict[str, tuple[int, Path]] = {}
        self.anchors: dict[str, tuple[int, Path]] = {}
        self.dynamic: dict[str, set[tuple[int, Path]]] = {}
        self.scopes: dict[tuple[int, Path], tuple[str, object]] = {}  # base URI, $schema
        self.nodes: dict[tuple[int, Path], object] = {}
        self._add_doc(root, ROOT_URI, schema_uri)
        for uri, doc in (remotes or {}).items():
            self._add_doc(doc, urldefrag(uri)[0], schema_uri)
        for i, doc in enumerate(self.docs):
            base, dialect = self.scopes[(i, ())]
            self._copy(i, doc, (), base, dialect)
        self.root = self.nodes[(0, ())]

    # -- index --------------------------------------------------------------------------
    def _add_doc(self, doc, uri: str, schema_uri) -> None:
        i = len(self.docs)
        self.docs.append(doc)
        self.resources.setdefault(uri, (i, ()))
        dialect = doc.get("$schema", schema_uri) if isinstance(doc, dict) else schema_uri
        self._index(i, doc, (), uri, dialect)
        self.doc_uris.append(self.scopes[(i, ())][0])

    def _own_base(self, node, base: str, dialect) -> str:
        if not isinstance(node, dict):
            return base
        ident = node.get(_id_keyword(dialect))
        if not isinstance(ident, str) or (_legacy(dialect) and "$ref" in node):
            return base  # drafts <= 7: an $id next to $ref is ignored like other siblings
        if _legacy(dialect) and ident.startswith("#"):
            return base  # a plain-name fragment: an anchor, not a new base
        return urldefrag(_join(base, ident))[0]

    def _index(self, i: int, node, path: Path, base: str, dialect) -> None:
        dialect = _node_dialect(node, path, dialect)
        new_base = self._own_base(node, base, dialect)
        self.scopes[(i, path)] = (new_base, dialect)
        if not isinstance(node, dict):
            return
        if new_base != base or not path:
            self.resources.setdefault(new_base, (i, path))
        ident = node.get(_id_keyword(dialect))
        names = []
        if _legacy(dialect):
            if isinstance(ident, str) and "$ref" not in node and "#" in ident:
                names.append(urldefrag(_join(base, ident))[1])
        else:
            names += [node.get("$anchor"), node.get("$dynamicAnchor")]
            if isinstance(node.get("$dynamicAnchor"), str):
                self.dynamic.setdefault(node["$dynamicAnchor"], set()).add((i, path))
        for name in names:
            if isinstance(name, str) and name:
                self.anchors.setdefault(f"{new_base}#{name}", (i, path))
        for steps, child in _subschemas(node):
            self._index(i, child, path + steps, new_base, dialect)

    # -- lookup -------------------------------------------------------------------------
    def locate(self, uri: str) -> tuple[int, Path] | None:
        """The document and path an absolute URI names (``None`` when nothing)."""
        resource, frag = urldefrag(uri)
        found = self.resources.get(resource)
        if found is None:
            return None
        frag = unquote(frag)
        if not frag:
            return found
        if not frag.startswith("/"):
            return self.anchors.get(f"{resource}#{frag}")
        i, path = found
        node = self._at(i, path)
        for raw in frag[1:].split("/"):
            step = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and step in node:
                node = node[step]
            elif (
                isinstance(node, list)
                and step.isdigit()
                and (step == "0" or not step.startswith("0"))
                and int(step) < len(node)
            ):
                step = int(step)
                node = node[step]
            else:
                return None
            path = path + (step,)
        return i, path

    def _at(self, i: int, path: Path):
        node = self.docs[i]
        for step in path:
            node = node[step]
        return node

    def key(self, loc: tuple[int, Path]) -> str:
        """The canonical absolute URI of a location."""
        i, path = loc
        return f"{self.doc_uris[i]}#{encode_pointer(path)}"

    def canonical(self, uri: str) -> str:
        """``uri`` in canonical form when it resolves, else unchanged."""
        loc = self.locate(uri)
        return uri if loc is None else self.key(loc)

    def schema(self, uri: str):
        """The rewritten subschema a canonical URI names, or ``None``."""
        loc = self.locate(uri)
        if loc is None:
            return None
        if loc not in self.nodes:  # a position no keyword marks as a subschema
            i, path = loc
            up = path
            while (i, up) not in self.scopes:
                up = up[:-1]
            base, dialect = self.scopes[(i, up)]
            self._copy(i, self._at(i, path), path, base, dialect)
        return self.nodes[loc]

    def display(self, uri: str) -> str:
        """``#/pointer`` for a place in the root document, the URI elsewhere."""
        prefix = self.doc_uris[0] + "#"
        return "#" + unquote(uri[len(prefix) :]) if uri.startswith(prefix) else uri

    # -- copy ---------------------------------------------------------------------------
    def _copy(self, i: int, node, path: Path, base: str, dialect):
        dialect = _node_dialect(node, path, dialect)
        if not isinstance(node, dict):
            self.nodes[(i, path)] = node
            return node
        own = self._own_base(node, base, dialect)
        out = dict(node)
        if not self.formats:
            out.pop("format", None)
        for steps, child in _subschemas(node):
            new = self._copy(i, child, path + steps, own, dialect)
            if len(steps) == 1:
                out[steps[0]] = new
            else:
                holder = out[steps[0]]
                if holder is node[steps[0]]:
                    holder = out[steps[0]] = type(holder)(holder)
                holder[steps[1]] = new
        if isinstance(node.get("$ref"), str):
            ref_base = base if _legacy(dialect) else own
            out["$ref"] = self.canonical(_join(ref_base, node["$ref"]))
            if self.legacy:
                out = {"$ref": out["$ref"]}
        if not _legacy(dialect) and isinstance(node.get("$dynamicRef"), str):
            self._dynamic_ref(out, _join(own, node["$dynamicRef"]))
        self.nodes[(i, path)] = out
        return out

    def _dynamic_ref(self, out: dict, uri: str) -> None:
        """Replace ``$dynamicRef`` by a ``$ref`` where its target cannot depend on scope."""
        loc = self.locate(uri)
        if loc is None:
            return
        name = unquote(urldefrag(uri)[1])
        target = self._at(*loc)
        dynamic = (
            name
            and not name.startswith("/")
            and isinstance(target, dict)
            and target.get("$dynamicAnchor") == name
        )
        if dynamic and len(self.dynamic.get(name, ())) != 1:
            return  # the outermost dynamic scope decides: not compiled
        del out["$dynamicRef"]
        if "$ref" in out:
            out["allOf"] = [*out.get("allOf", []), {"$ref": self.key(loc)}]
        else:
            out["$ref"] = self.key(loc)


def check_remotes(remotes) -> dict | None:
    """Validate the ``remote_schemas`` option; a plain dict (or ``None``)."""
    if remotes is None:
        return None
    if not isinstance(remotes, Mapping):
        raise GrammarError(
            f"remote_schemas must be a mapping of URI to schema, got {type(remotes).__name__}"
        )
    for uri, doc in remotes.items():
        if not isinstance(uri, str):
            raise GrammarError(f"remote_schemas keys must be URI strings, got {uri!r}")
        if not isinstance(doc, (dict, bool)):
            raise GrammarError(
                f"remote_schemas[{uri!r}] must be a dict or a bool, got {type(doc).__name__}"
            )
        if urldefrag(uri)[1]:
            raise GrammarError(f"remote_schemas key {uri!r} must not have a fragment")
    return dict(remotes)
