"""NIC and host profiles as data files: see nicsim.profiles.profile."""

from nicsim.profiles.profile import (
    HOST_DIR,
    PROFILE_DIR,
    SECTIONS,
    PerftestDevice,
    Profile,
    ProfileError,
    host_profile_names,
    load_host_profile,
    load_profile,
    profile_names,
    with_host,
)

__all__ = ["HOST_DIR", "PROFILE_DIR", "SECTIONS", "PerftestDevice", "Profile", "ProfileError",
           "host_profile_names", "load_host_profile", "load_profile", "profile_names",
           "with_host"]
