"""pipelines.build: the resumable dask build — sample, teach, verify, write shards, manifest and card."""
