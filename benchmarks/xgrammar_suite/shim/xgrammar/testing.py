"""``xgrammar.testing`` is ``treegram.testing``."""

import sys

import treegram.testing

sys.modules[__name__] = treegram.testing
