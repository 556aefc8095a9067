"""Draft trees: parent pointers, first-child/next-sibling links and tree attention masks."""

from __future__ import annotations

# The public names are those of _links, listed once there.
from treegram.spec._links import *  # noqa: F403
from treegram.spec._links import __all__ as __all__
