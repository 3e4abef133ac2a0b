# The Helm chart (charts/kubecua) and its dashboards-as-code generator (charts/kubecua-dashboards-gen).
$(eval $(call python-project,dashboards-gen,charts/kubecua-dashboards-gen))
TEST_TARGETS += test-charts
HELM := $(BIN)/helm
CHART_TESTS := e2e/test_helm_chart_renders.py e2e/test_helm_values_schema.py \
	e2e/test_dashboards_match_generator.py e2e/test_prometheus_rules_check.py
.PHONY: test-charts dashboards lint-dashboards
LINT_TARGETS += lint-dashboards

dashboards: dashboards-gen-env ## regenerate the Grafana dashboards JSON shipped in the chart
	cd charts/kubecua-dashboards-gen && .venv/bin/python -m kubecua_dashboards

# Grafana cannot run here: its dashboard types (npm @grafana/schema, with tsc) stand in for it.
lint-dashboards: ## check the dashboards against Grafana's own dashboard types (@grafana/schema, tsc)
	hack/grafana-schema-check/check.sh --self-test
	hack/grafana-schema-check/check.sh

test-charts: setup-apt dashboards-gen-env tests-env setup-go ## helm lint/template, schema negatives, CRD + dashboard drift, promtool
	$(HELM) lint --strict charts/kubecua
	$(HELM) lint --strict charts/kubecua --set serviceMonitor.enabled=true,podMonitor.enabled=true,prometheusRule.enabled=true,dashboards.enabled=true
	cd charts/kubecua-dashboards-gen && .venv/bin/python -m kubecua_dashboards --check
	diff -r crds charts/kubecua/files/crds
	cd tests && .venv/bin/pytest -q $(CHART_TESTS)
