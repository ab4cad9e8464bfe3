"""The live layer: the frame feed (provider pull or replay) that keeps each symbol's current verified frame."""
