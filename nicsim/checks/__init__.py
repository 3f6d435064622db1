"""Checks a run can be held to: physical invariants (physics)."""
