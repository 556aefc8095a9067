"""Draft trees: parent pointers, first-child/next-sibling links and tree attention masks."""

from __future__ import annotations

from treegram.spec._links import (
    depths_from_parents,
    links_from_parents,
    links_from_tree_mask,
    parents_from_tree_mask,
    positions_from_parents,
    tree_mask_from_parents,
    validate_tree,
)

__all__ = [
    "links_from_parents",
    "parents_from_tree_mask",
    "links_from_tree_mask",
    "tree_mask_from_parents",
    "depths_from_parents",
    "positions_from_parents",
    "validate_tree",
]
