"""The PyTorch layer of swapffn: the engine's slot step as a custom op (`step`) and SPEC as a
trainable module (`SwapFFN`)."""
