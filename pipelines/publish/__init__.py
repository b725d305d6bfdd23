"""pipelines.publish: the dataset card (README.md with YAML configs and plots) and the Hub upload."""
