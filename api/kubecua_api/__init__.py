"""The kubecua.dev/v1alpha1 API: TrainingRun and SandboxPool models, names and defaults."""
