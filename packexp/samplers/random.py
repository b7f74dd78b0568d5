"""``sampler=random``: every configuration drawn uniformly at random (Li et al.'s Hyperband)."""

from packexp.samplers import Sampler


class RandomSampler(Sampler):
    """The base sampler's uniform draws, under the name its config file gives."""
