"""The float32 conv engine: geometry and target records, the planners (direct, depthwise, Winograd) and its
interface (engine.py: plan_conv, layout_kernel)."""
