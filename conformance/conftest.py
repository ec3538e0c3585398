"""Running ``pytest conformance`` from the repository root: load the plugin under its installed name only."""
pytest_plugins = ["glow_conformance.plugin"]
