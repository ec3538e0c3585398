"""Post-plan fusions of the CPU backend: instructions of the planned IR that run inside another's kernel."""
