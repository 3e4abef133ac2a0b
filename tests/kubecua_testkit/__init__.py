"""kubecua."""
