"""Tokenizer vocabularies: decoded token bytes, stop and special tokens, sorted-vocab arrays.

Example
-------
>>> from treegram.tokenizer import TokenizerInfo, VocabType
>>> info = TokenizerInfo(["a", "Ġb", "</s>"], VocabType.BYTE_LEVEL)
>>> info.decoded_vocab, info.stop_token_ids
([b'a', b' b', b'</s>'], [2])
"""

from __future__ import annotations

from treegram.tokenizer._decode import BYTE_LEVEL_CHARSET
from treegram.tokenizer._deepseek import deepseek_v4_tokenizer_json
from treegram.tokenizer._info import TokenizerInfo, VocabType

__all__ = ["TokenizerInfo", "VocabType", "BYTE_LEVEL_CHARSET", "deepseek_v4_tokenizer_json"]
