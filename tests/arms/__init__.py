"""Tests of harness/arms: the arms, their construction, ids and results."""
