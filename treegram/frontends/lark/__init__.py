"""The Lark frontend: Lark grammar text to grammar IR (xgrammar 0.2.8's subset)."""

from treegram.frontends.lark._parse import lark_to_ir

__all__ = ["lark_to_ir"]
