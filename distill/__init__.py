"""distill: teachers write Triton candidates for problems; the verifier decides which are honest and correct."""
