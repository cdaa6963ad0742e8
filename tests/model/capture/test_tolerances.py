"""The float32 tolerance rule (tests/helpers/tolerances.py) against float32 arithmetic itself:
the same dot products summed in other orders stay inside it, a real difference does not."""

import numpy as np
import pytest

from tests.helpers.tolerances import F32_EPS, assert_float32_close, float32_atol


@pytest.mark.parametrize("k", [32, 768, 3072])
def test_reordered_sums_stay_inside_the_bound(k):
    rng = np.random.default_rng(k)
    a = rng.standard_normal((256, k)).astype(np.float32)
    b = rng.standard_normal(k).astype(np.float32) / np.sqrt(k)  # unit-sized results, as in a layer
    blocked = a @ b  # BLAS: blocked, vectorised order
    serial = np.zeros(256, np.float32)
    for i in range(k):  # strictly left to right, rounding at every step
        serial += a[:, i] * b[i]
    reverse = np.zeros(256, np.float32)
    for i in reversed(range(k)):
        reverse += a[:, i] * b[i]
    for other in (serial, reverse):
        assert_float32_close(other, blocked, reduction=k, scale=1.0, what=f"K={k}")
    assert np.abs(serial - blocked).max() > 0  # the orders do round differently


def test_a_real_error_fails_and_the_rule_scales():
    assert float32_atol(3072, 12) == pytest.approx(4 * F32_EPS * np.sqrt(3072 * 12))
    assert float32_atol(100, 1, scale=10) == pytest.approx(10 * float32_atol(100))
    with pytest.raises(AssertionError, match="over the float32 bound"):
        assert_float32_close(np.float32([1.0 + 1e-3]), np.float32([1.0]), reduction=3072, depth=12)
    with pytest.raises(ValueError):
        float32_atol(0)
