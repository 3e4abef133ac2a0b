"""What a run shows while it runs: Prometheus metrics (metrics.py), the TrainingRun's status
(status.py), what the run costs (cost.py), live-view links (liveview.py) and the console's
progress (progress.py). The report written from a run's folder is report/."""
