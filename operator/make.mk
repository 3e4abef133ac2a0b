# The kopf operator (operator/) and its CRDs (crds/).
$(eval $(call python-project,operator,operator))
TEST_TARGETS += test-operator
.PHONY: test-operator bench-operator fuzz-specs run-operator

test-operator: operator-env setup-go setup-addons ## operator unit tests and its tests on the real control plane (kwok; Kueue's tests run Kueue)
	cd operator && .venv/bin/pytest -q

bench-operator: operator-env setup-go tests-env ## SandboxPool 0->1000 on kwok and discovery latency; prints JSON (BENCH_ARGS=--smoke)
	cd operator && .venv/bin/python -m bench.scale $(BENCH_ARGS)

fuzz-specs: operator-env setup-go tests-env ## 2,000 hypothesis specs of each kind against the API server and the operator; prints JSON counts (issue 42)
	cd operator && .venv/bin/python -m bench.spec_fuzz $(FUZZ_ARGS)

run-operator: operator-env ## run the operator against the KUBECONFIG cluster (kubectl apply -f crds/ first)
	cd operator && .venv/bin/python -m kubecua_operator
