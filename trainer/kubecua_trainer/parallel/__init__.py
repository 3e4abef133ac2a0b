"""Several processes and threads: torchrun's ranks and collectives (distributed.py), what the
ranks of a step send each other (exchange.py), worker threads on their process's GPU (threads.py),
and one GPU shared by generation and learning (gpu_share.py)."""
