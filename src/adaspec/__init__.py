"""AdaSPEC: selective knowledge distillation of draft models for speculative decoding."""

__version__ = "0.1.0"
