"""harness.store.turns.concat: the per-turn frames of the session groups in one, each categorical column
over the sorted union of the groups' categories (as text), the columns in their order."""
from __future__ import annotations

import pandas as pd

from harness.store.turns import concat


def test_groups_join_with_their_categories_united_as_text_and_columns_in_order():
    a = pd.DataFrame({"arm_id": pd.Categorical(["x", "y"]), "value": [1.0, 2.0],
                      "session_id": pd.Categorical(["s2", "s1"])})
    empty = pd.DataFrame({"arm_id": pd.Categorical([]), "value": [], "session_id": pd.Categorical([])})
    b = pd.DataFrame({"arm_id": pd.Categorical(["z"]), "value": [3.0], "session_id": pd.Categorical([7])})
    out = concat([a, empty, b])
    assert list(out.columns) == ["arm_id", "value", "session_id"]
    assert out["session_id"].tolist() == ["s2", "s1", "7"]  # an integer category as text
    assert out["session_id"].cat.categories.tolist() == ["7", "s1", "s2"]
    assert out["arm_id"].tolist() == ["x", "y", "z"] and isinstance(out["arm_id"].dtype, pd.CategoricalDtype)
    assert out["value"].tolist() == [1.0, 2.0, 3.0] and list(out.index) == [0, 1, 2]


def test_a_column_categorical_in_one_group_only_is_concatenated_as_pandas_does():
    a = pd.DataFrame({"metric": pd.Categorical(["m"]), "unmeasured": pd.Categorical(["x"])})
    b = pd.DataFrame({"metric": pd.Categorical(["n"]), "unmeasured": [None]})
    out = concat([a, b])
    assert isinstance(out["metric"].dtype, pd.CategoricalDtype) and out["metric"].tolist() == ["m", "n"]
    assert out["unmeasured"].tolist()[0] == "x" and pd.isna(out["unmeasured"].tolist()[1])


def test_a_column_only_a_later_group_has_is_kept_as_pandas_keeps_it():
    a = pd.DataFrame({"arm_id": pd.Categorical(["x"]), "value": [1.0]})
    b = pd.DataFrame({"arm_id": pd.Categorical(["y"]), "value": [2.0], "extra": [5]})
    out = concat([a, b])
    assert list(out.columns) == ["arm_id", "value", "extra"]
    assert pd.isna(out["extra"].iloc[0]) and out["extra"].iloc[1] == 5
