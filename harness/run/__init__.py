"""The run stage: replaying arms into a run folder (replay, shards, the trace row, the manifest,
the judge step) and the folder's one owner (folder.py)."""
