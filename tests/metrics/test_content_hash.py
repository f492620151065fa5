"""harness.metrics.provenance.content_hash: the same values give the same hash however the table
is cut into pieces (chunks of nulls only, of no null, of both take different paths), and the
hash of a fixed table is the one committed stamps were made with."""
from __future__ import annotations

import pyarrow as pa

from harness.metrics.provenance import content_hash

TYPES = {"f": pa.float64(), "i": pa.int64(), "b": pa.bool_(), "s": pa.large_string(), "nulls": pa.float64(),
         "i32": pa.int32(), "full": pa.float64(), "t": pa.string()}
VALUES = {"f": [None, None, None, 1.5, None, 2.0], "i": [None, None, None, None, 3, 4],
          "b": [None, None, True, False, None, None], "s": [None, None, None, "a", None, "b"], "nulls": [None] * 6,
          "i32": [None, None, None, None, 1, 2], "full": [1.0, 2, 3, 4, 5, 6], "t": [None, None, None, None, "x", "y"]}


def test_pieces_of_nulls_only_or_no_null_hash_as_the_whole_and_as_before():
    t = pa.table({k: pa.array(v, TYPES[k]) for k, v in VALUES.items()})
    ids = t.set_column(t.schema.get_field_index("s"), "s", t.column("s").dictionary_encode())
    for table in (t, ids):  # strings as dictionaries: the same content
        cuts = [[table], [table.slice(0, 3), table.slice(3)], [table.slice(i, 1) for i in range(6)]]
        assert {content_hash(c) for c in cuts} == {"4bfe85526c047394a874f2d1b1befd8b"}  # the digest before this change
    changed = t.set_column(t.schema.get_field_index("nulls"), "nulls", pa.array([None] * 5 + [0.0]))
    assert content_hash([changed]) != content_hash([t])  # a 0 is not a null
