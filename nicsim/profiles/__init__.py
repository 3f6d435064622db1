"""NIC profiles as data files: see nicsim.profiles.profile."""

from nicsim.profiles.profile import (
    PROFILE_DIR,
    SECTIONS,
    PerftestDevice,
    Profile,
    ProfileError,
    load_profile,
    profile_names,
)

__all__ = ["PROFILE_DIR", "SECTIONS", "PerftestDevice", "Profile", "ProfileError",
           "load_profile", "profile_names"]
