"""kubecua's Grafana dashboards as code (grafana-foundation-sdk); `python -m kubecua_dashboards`."""
