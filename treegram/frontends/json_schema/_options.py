"""The JSON Schema frontend's options (xgrammar 0.2.8's), listed once.

:func:`~treegram.frontends.json_schema.json_schema_to_ir`, ``Grammar.from_json_schema`` and
``GrammarCompiler.compile_json_schema`` take them as keyword arguments; inside, they travel
as one :class:`JsonSchemaOptions`, whose :meth:`~JsonSchemaOptions.cache_key` is the
compiler's cache key, so an option added here is part of the key.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["JsonSchemaOptions"]


@dataclass(frozen=True)
class JsonSchemaOptions:
    """The output layout and the strictness of one JSON Schema conversion.

    See :func:`~treegram.frontends.json_schema.json_schema_to_ir` for each option.
    """

    any_whitespace: bool = True
    indent: int | None = None
    separators: tuple[str, str] | None = None
    strict_mode: bool = True
    max_whitespace_cnt: int | None = None
    unsupported: str | Collection[str] = "error"
    unknown_format: str = "warn"
    format_assertion: bool = True
    canonical_integers: bool = True
    any_order: bool = False
    remote_schemas: Mapping[str, dict | bool] | None = None

    def as_kwargs(self) -> dict[str, Any]:
        """The options as keyword arguments of ``json_schema_to_ir``."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def cache_key(self) -> tuple:
        """A hashable, order-independent tuple with one entry per option, for cache keys."""
        key = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "separators":
                value = tuple(value) if value else None
            elif f.name == "unsupported" and not isinstance(value, str):
                value = tuple(sorted(value))
            elif f.name == "remote_schemas" and value is not None:
                value = json.dumps(value, sort_keys=True)
            key.append(value)
        return tuple(key)
