"""glow_interpreter: the numpy reference backend, the specification of every primitive."""
