"""Token samplers: draw the next token under a constraint and return a proper log-weight."""

from constrain.samplers.lcd import sample_lcd

__all__ = ["sample_lcd"]
