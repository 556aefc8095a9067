"""``xgrammar.exception``: treegram's exception types under xgrammar's names."""

from treegram.errors import (
    DeserializeFormatError,
    DeserializeVersionError,
    InvalidJSONError,
    InvalidStructuralTagError,
)

__all__ = [
    "DeserializeFormatError",
    "DeserializeVersionError",
    "InvalidJSONError",
    "InvalidStructuralTagError",
]
