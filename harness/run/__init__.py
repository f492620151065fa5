"""The replay engine: arms over an eval set into a run folder (replay.py), on worker processes
(parallel.py, shard_worker.py), with progress shown as it goes. What it writes is harness/store's."""
