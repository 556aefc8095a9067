"""``xgrammar.tokenizer_info``: ``TokenizerInfo``, ``VocabType`` and the byte-level alphabet."""

from treegram.tokenizer import BYTE_LEVEL_CHARSET as _BYTE_LEVEL_CHARSET
from treegram.tokenizer import TokenizerInfo, VocabType

__all__ = ["TokenizerInfo", "VocabType", "_BYTE_LEVEL_CHARSET"]
