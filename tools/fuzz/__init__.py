"""Differential fuzzing (``glowc fuzz``) and importer fuzzing: see the modules of this package."""
