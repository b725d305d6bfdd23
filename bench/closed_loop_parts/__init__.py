"""Pieces of bench/closed_loop.py: one module per stage, plus the profiles and what they share."""
