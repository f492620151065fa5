"""The run folder's contract: the folder and its files (folder.py, their one owner), the manifest
record, the trace parts, the arm set, integrity and shards. Everything after a replay reads a run
through this package; it imports no engine, model or SDK."""
