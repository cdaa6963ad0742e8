"""Arrays whose memory comes from torch behave as the numpy arrays they stand in for."""

import gc

import numpy as np
import pytest

from transformer_viewer.model import host_arrays


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int64, np.bool_])
def test_empty_and_zeros_have_the_asked_shape_and_dtype(dtype):
    a = host_arrays.empty((3, 5, 7), dtype)
    z = host_arrays.zeros((4, 6), dtype)
    assert a.shape == (3, 5, 7) and a.dtype == np.dtype(dtype) and a.flags.c_contiguous and a.flags.writeable
    assert z.shape == (4, 6) and z.dtype == np.dtype(dtype)
    assert not z.any()


def test_the_memory_lives_as_long_as_the_array():
    a = host_arrays.zeros((256, 256), np.float32)
    a[:] = np.arange(256, dtype=np.float32)
    view = a[10:20]
    del a
    gc.collect()
    host_arrays.empty((256, 256), np.float32)[:] = -1  # would reuse freed memory
    np.testing.assert_array_equal(view, np.tile(np.arange(256, dtype=np.float32), (10, 1)))
