"""curriculum: turn problems and verified candidates into SFT and curriculum RL Parquet shards."""
