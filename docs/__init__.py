"""The project's documents, installed as `tritonforge_docs`: a dataset card carries verifier.md beside it."""
