"""The sampler's hard bounds: levels, batch size, repeats.

In a module of their own so the CLI can state them in `--help` without importing the sampler (which
imports torch: 2-3 s)."""

# The largest level `sample` draws. Measured on the 2-core CPU box (seconds per problem): level 20
# 0.07, 64 2.3, 128 5, 256 90; at 512 no op list found a valid program in 64 wirings (500 s).
# Levels past the cap are refused at once rather than left to run for minutes.
MAX_LEVEL = 64
# The most problems one `sample` call returns: they are all held in memory (about 8 KiB each at
# level 1, 70 KiB at level 20).
MAX_BATCH = 100_000
# Unique sampling stops after this many draws in a row that were all repeats. The problems still
# unseen then carry under 0.3% of the draw probability (the rule of three, 95% confidence), so
# going on would cost hundreds of draws per new problem. Tiny spaces need room: with
# `triplet_margin_loss` at max_elements 64 (14 distinct problems), 81 repeats came before the last new one.
MAX_REPEATS = 1000
