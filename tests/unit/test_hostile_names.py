"""Kernel names from a hostile file stay cheap to classify."""

from __future__ import annotations

from nsys_rules.analysis.taxonomy import CLASSIFY_CHARS, Taxonomy


def test_only_the_head_of_a_huge_name_is_classified():
    taxonomy = Taxonomy()
    assert taxonomy.classify_one("gemv_kernel_" + "x" * 1_000_000) == "gemv"
    assert taxonomy.classify_one("x" * CLASSIFY_CHARS + "_gemv_kernel") == "other"
    assert taxonomy.classify_one("k" * (CLASSIFY_CHARS - 20) + "_gemv_kernel") == "gemv"
