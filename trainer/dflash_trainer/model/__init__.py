"""The DFlash drafter, the target-layer taps and the servable export format."""
