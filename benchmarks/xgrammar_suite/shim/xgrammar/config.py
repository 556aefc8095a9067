"""``xgrammar.config``: the process-wide settings from treegram."""

from treegram import (
    get_max_recursion_depth,
    get_serialization_version,
    max_recursion_depth,
    set_max_recursion_depth,
)

__all__ = [
    "get_max_recursion_depth",
    "get_serialization_version",
    "max_recursion_depth",
    "set_max_recursion_depth",
]
