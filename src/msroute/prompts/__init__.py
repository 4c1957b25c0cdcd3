"""Contexts from a prompt's text: hashed n-gram features and a clustering fitted on an eval
table's prompts (``msroute.prompts.features``, ``msroute.prompts.model``)."""

from msroute.prompts.features import DIM, FEATURIZER, feature_matrix, prompt_features
from msroute.prompts.model import (
    ContextModel,
    ContextModelError,
    fit_context_model,
    load_context_model,
)

__all__ = [
    "DIM",
    "FEATURIZER",
    "ContextModel",
    "ContextModelError",
    "feature_matrix",
    "fit_context_model",
    "load_context_model",
    "prompt_features",
]
