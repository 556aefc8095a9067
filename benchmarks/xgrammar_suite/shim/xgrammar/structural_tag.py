"""``xgrammar.structural_tag`` is ``treegram.structural_tag``."""

import sys

import treegram.structural_tag

sys.modules[__name__] = treegram.structural_tag
