"""synth: draw operator graphs uniformly at a chosen difficulty and render them as KernelBench problems."""
from synth.catalog import CatalogError, OpSpec, load_catalog, operators
from synth.problem import Problem
from synth.profiles import ProfileError, load_profile, profile_names
from synth.sampler import SampleConfig, SamplingError, dedup, sample

__all__ = ["CatalogError", "OpSpec", "Problem", "ProfileError", "SampleConfig", "SamplingError", "dedup",
           "load_catalog", "load_profile", "operators", "profile_names", "sample"]
