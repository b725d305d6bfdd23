"""synth: draw operator graphs uniformly at a chosen difficulty and render them as KernelBench problems."""
