"""Crucible training: sample -> sandbox -> reward -> advantage -> PPO update -> checkpoint.

Kept import-light on purpose: importing ``training`` (e.g. for ``training.config`` in the web app's
form generation) must not import torch or transformers. Import the submodules you need.
"""

__all__ = ["config"]
