"""hornn_dist: a distributed trainer for Higher Order RNN language models (Soltani & Jiang, 2016)."""

__version__ = "0.1.0"
