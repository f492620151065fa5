"""harness.metrics.coinciding.top_keys: rankings as strings or as dictionary codes (the scoring
step's group files) get the same keys, row for row, whatever the slice, the chunks, the nulls."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from harness.metrics.coinciding import top_keys


def _rankings(seed: int, n: int = 400) -> pa.ListArray:
    rng = np.random.default_rng(seed)
    rows = [None if rng.random() < 0.05 else
            [None if rng.random() < 0.02 else f"d{rng.integers(0, 40)}" for _ in range(rng.integers(0, 25))]
            for _ in range(n)]
    return pa.array(rows, pa.list_(pa.string()))


@pytest.mark.parametrize("k", [1, 3, 10, 64])
def test_dictionary_codes_give_the_keys_of_the_strings(k):
    text = _rankings(k)
    codes = pa.ListArray.from_arrays(text.offsets, pc.dictionary_encode(text.values), mask=text.is_null())
    want = top_keys(text, k)
    assert len(set(want.tolist())) > 30  # distinct top k, distinct keys (40 documents)
    assert (top_keys(codes, k) == want).all()
    assert (top_keys(codes.slice(9, 300), k) == want[9:309]).all()
    assert (top_keys(pa.chunked_array([codes.slice(0, 150), codes.slice(150)]), k) == want).all()


def test_equal_top_k_equal_keys_and_empty_or_missing_rankings_zero():
    text = pa.array([["a", "b", "c"], ["a", "b", "x"], ["b", "a"], [], None], pa.list_(pa.string()))
    codes = pa.ListArray.from_arrays(text.offsets, pc.dictionary_encode(text.values), mask=text.is_null())
    for arr in (text, codes):
        got = top_keys(arr, 2).tolist()
        assert got[0] == got[1] != got[2] and got[3] == got[4] == 0
        assert top_keys(arr, 3)[0] != top_keys(arr, 3)[1]
    empty = pa.array([], pa.list_(pa.dictionary(pa.int32(), pa.string())))
    assert top_keys(empty, 10).tolist() == []
