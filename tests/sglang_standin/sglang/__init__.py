"""A stand-in for sglang, for the real-node test of the sglang engine
(tests/e2e/test_real_node_sglang_weights.py). NOT sglang: real sglang has never run here (it
needs a GPU and is not installable on this project's machines). Only `sglang.launch_server` is
provided, so the operator's Deployment (`python3 -m sglang.launch_server ...`) runs it unchanged
but for its image."""
