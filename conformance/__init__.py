"""glow_conformance: the conformance suite that gates a backend against the reference interpreter."""
