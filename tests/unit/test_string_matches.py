"""The string-table pre-check in RE2 (``loaders.strings._any_re2``) answers as Python's engine does,
or leaves the answer to it (None) where RE2 cannot judge."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from nsys_rules.model.job.extract import _plainly_one_gpu
from nsys_rules.model.job.names import CommNames, comm_names
from nsys_rules.loaders.strings import _any_re2

KERNELS = ["void gemv_kernel<float>(float const*)", "ampere_sgemm_128x64_nn", "gemm_1_" * 600,
           "void at::native::vectorized_elementwise_kernel<4, float>", "cross_device_reduce_2stage<float>"]


@pytest.mark.parametrize("extra,expected", [
    ([], True),  # cross_device_reduce_2stage is a communication kernel
    (["ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)"], True),
])
def test_same_answer_as_python(extra, expected):
    pattern = comm_names().any_family
    values = np.array((KERNELS + extra) * 20, object)
    assert _any_re2(values, pattern) is expected
    assert any(pattern.search(v) for v in values) is expected


def test_no_match_either_way():
    pattern = comm_names().any_family
    values = np.array(KERNELS[:4] * 20 + ["my_nccl_helper", "xncclFoo"], object)
    assert _any_re2(values, pattern) is False
    assert not any(pattern.search(v) for v in values)


@pytest.mark.parametrize("values,pattern", [
    (["abc"] * 80, r"(?<=a)b"),  # a look-behind: RE2 has none
    (["a\udcff"] * 80, r"a"),  # a lone surrogate is not UTF-8
])
def test_left_to_python(values, pattern):
    assert _any_re2(np.array(values, object), re.compile(pattern)) is None


def test_patterns_that_do_not_combine_skip_the_string_table_check():
    # Two family patterns naming the same group cannot sit in one alternation: there is then no one pattern,
    # and the one-GPU shortcut (which asks the string table with one) is not taken; it used to be handed an
    # object without .pattern, which the RE2 pre-check failed on.
    names = CommNames((("nccl", (re.compile("(?P<lib>nccl)Dev"), re.compile("(?P<lib>rccl)Dev"))),), (), ())
    assert names.any_family is None
    asked: list[object] = []
    trace = SimpleNamespace(export=SimpleNamespace(any_string_matches=asked.append))
    assert _plainly_one_gpu(trace, names) is False and not asked
