"""One intra-op thread for torch on a host without CUDA, unless OMP_NUM_THREADS says otherwise.

Why: on a CPU host shared with other work (the desktops a run plays on, other processes), torch's
default of one OpenMP thread per core makes every operator wait at a barrier for a thread the
scheduler has preempted. Measured on the 2-core development machine at load average 11-12
(2026-11-28, one warm-up epoch of the 65 colourkeys demonstrations on the bench model,
timed under cProfile): 152 s an epoch with torch's default 2 threads, 13 s with 1. The models
trained on CPU (tests, the demo, the learning benchmark) are tiny, so a second thread gains
little even on an idle host. On a GPU host the CPU threads only feed the GPU and are left as
torch sets them.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def limit_cpu_threads() -> int:
    """Set torch's intra-op threads to 1 where there is no CUDA and OMP_NUM_THREADS is unset;
    returns the number of threads torch uses afterwards."""
    import torch

    if not torch.cuda.is_available() and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    threads = torch.get_num_threads()
    log.info("torch intra-op threads: %d", threads)
    return threads
