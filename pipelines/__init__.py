"""pipelines: the command line, the resumable dask build, Hub publishing and the GRPO trainer."""
