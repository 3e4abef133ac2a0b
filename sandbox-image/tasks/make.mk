# Task families (sandbox-image/tasks: the kubecua-tasks uv project): generators as plugins of the
# entry-point group kubecua.task_families, the `kubecua tasks` command (list, generate, verify)
# and the built-in families' files. docs/tasks.md.
$(eval $(call python-project,tasks,sandbox-image/tasks))
TASKS_PY := sandbox-image/tasks/.venv/bin/python

.PHONY: check-tasks test-tasks bench-tasks bench-tasks-leasing
LINT_TARGETS += check-tasks
check-tasks: tasks-env ## every built-in family's files as its plugin writes them (make_tasks.py --check)
	$(TASKS_PY) sandbox-image/tasks/make_tasks.py --check

TEST_TARGETS += test-tasks
test-tasks: tasks-env sandbox-env ## task plugins, and verification of offline-suite families on real Xvfb desktops
	cd sandbox-image/tasks && .venv/bin/pytest -q tests

# Issue 41 item 5's four families the learning benchmark was never tuned on (untuned_families.toml:
# the colourkeys generator's parameters alone) into out/families/<name>, each folder emptied first;
# not committed, the same bytes every run (tests/test_untuned_families.py). Then, per family:
# make bench-learning with --family naming that folder (docs/benchmarks.md gives the commands).
.PHONY: untuned-families
untuned-families: tasks-env ## write the 4 untuned colourkeys families (untuned_families.toml) into out/families/<name>
	$(TASKS_PY) sandbox-image/tasks/make_families.py sandbox-image/tasks/untuned_families.toml --out $(CURDIR)/out/families

# Verification throughput at 1, 2 and 4 local desktops (BENCH_ARGS="--desktops 1 2 4 8" for 8),
# per-desktop efficiency, as JSON (docs/benchmarks.md). Starts its own desktops.
bench-tasks: tasks-env sandbox-env ## JSON: task verification throughput and per-desktop efficiency at 1, 2, 4 local desktops
	$(TASKS_PY) sandbox-image/tasks/bench/bench_tasks.py $(BENCH_ARGS)

# Verification's leasing side at scale: a pool of 1,000 sandbox endpoints on a local control plane
# with kwok nodes (its own, deleted after), followed as `--pool` does, and the verify engine
# playing 6,000 instant episodes against one in-process stand-in episode server (kwok nodes run
# nothing). JSON: discovery seconds, leases/s, episodes/s, fairness, peak RSS, double leases
# (docs/benchmarks.md). BENCH_ARGS="--sandboxes 20" for a smoke run.
bench-tasks-leasing: tasks-env setup-go ## JSON: discovery of a 1,000-sandbox pool on kwok, leases/s, episodes/s, fairness (stand-in episode server)
	$(TASKS_PY) sandbox-image/tasks/bench/bench_leasing.py $(BENCH_ARGS)
