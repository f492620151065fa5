"""Tests of harness/roles: the offline roles and the roles' schemas."""
