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


def test_chunks_of_their_own_dictionaries_and_a_dictionary_of_no_id():
    text = _rankings(7)
    a, b = text.slice(0, 200), text.slice(200)
    own = [pa.ListArray.from_arrays(pa.array([o - x.offsets[0].as_py() for o in x.offsets.to_pylist()], pa.int32()),
                                    pc.dictionary_encode(x.values.slice(x.offsets[0].as_py(),
                                                                        x.offsets[-1].as_py() - x.offsets[0].as_py())),
                                    mask=x.is_null()) for x in (a, b)]
    assert own[0].values.dictionary != own[1].values.dictionary
    assert (top_keys(pa.chunked_array(own), 10) == top_keys(text, 10)).all()
    nothing = pa.ListArray.from_arrays(pa.array([0, 2, 2], pa.int32()), pa.DictionaryArray.from_arrays(
        pa.array([None, None], pa.int32()), pa.array([], pa.string())))
    assert top_keys(nothing, 10).tolist() == top_keys(pa.array([[None, None], []], pa.list_(pa.string())), 10).tolist()
