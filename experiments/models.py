"""PyTorch models for experiment files (``train.model: models:function``).

As with loaders, an experiment file's folder is put on ``sys.path``, so ``models:mlp`` in
experiments/train_mlp.yaml imports this module. A model function returns a fresh
``torch.nn.Module``; its ``kwargs`` come from the file. Functions from a module beside the
experiment file reach the workers by value, so the workers need not have this folder.
"""

from __future__ import annotations

import torch


def mlp(n_features: int = 20, hidden: int = 64, n_classes: int = 2) -> torch.nn.Module:
    """A two-layer perceptron returning one logit per class (for cross_entropy)."""
    return torch.nn.Sequential(
        torch.nn.Linear(n_features, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, n_classes),
    )
