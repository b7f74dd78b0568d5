"""The paper's micro-benchmarks (section 4): one module per profile, named as its config file."""

from packexp.profile.base import Profile, ProfileContext

__all__ = ["Profile", "ProfileContext"]
