"""Arms: ways of turning a user turn into retrieval, one file each, registered with @register
(harness/arms/base.py). harness.arms.catalog imports them all; importing this package does not."""
