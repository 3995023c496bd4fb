"""Evaluation metrics and the MMD divergence shared with training."""
from tfpriv.metrics.classification import accuracy, auroc, knn_mutual_information
from tfpriv.metrics.clustering import cluster_purity
from tfpriv.metrics.generative import frechet_distance, frechet_distance_from_stats, inception_score
from tfpriv.metrics.kernels import DEFAULT_SCALES, cauchy_kernel_matrix, cauchy_mmd, mmd_metric
from tfpriv.metrics.likelihood import importance_sampled_log_likelihood, log_likelihood_record
from tfpriv.metrics.sparsity import hoyer, hoyer_sparsity

__all__ = [
    "DEFAULT_SCALES",
    "accuracy",
    "auroc",
    "cauchy_kernel_matrix",
    "cauchy_mmd",
    "classifier_outputs",
    "cluster_purity",
    "frechet_distance",
    "frechet_distance_from_stats",
    "get_classifier",
    "hoyer",
    "hoyer_sparsity",
    "importance_sampled_log_likelihood",
    "inception_score",
    "knn_mutual_information",
    "log_likelihood_record",
    "mmd_metric",
]


def __getattr__(name):
    # Lazy, so `python -m tfpriv.metrics.eval_classifier` does not import itself twice.
    if name in ("classifier_outputs", "get_classifier"):
        from tfpriv.metrics import eval_classifier
        return getattr(eval_classifier, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
