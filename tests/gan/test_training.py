"""A GAN through fit_private: one ledger step per critic step, resume continues epsilon, the budget stop holds."""
import numpy as np
import pytest

from tfpriv.gan.dpgan import make_dpgan, rmsprop
from tfpriv.gan.training import Limit, Monitor
from tfpriv.privacy.accounting import RDP
from tfpriv.privacy.config import DPConfig
from tfpriv.privacy.terms import TermSpec
from tfpriv.training.runner import fit_private, plan_privacy

N, B, Z = 400, 4, 1.1  # q = 0.01: an epoch is 100 critic steps


def _fit(tmp_path, epochs, max_epsilon=None, max_steps=None):
    rng = np.random.default_rng(0)
    images = rng.random((N, 28, 28, 1), dtype=np.float32)
    labels = rng.integers(0, 10, N).astype(np.int32)
    model = make_dpgan(capacity=2, latent_size=4, num_classes=10, critic_steps=2, seed=0)
    config = DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=Z, expected_batch_size=float(B),
                      clipping="fast", seed=0, verify=False)
    plan = plan_privacy(config, TermSpec(sample=("wasserstein",)), N, B, epochs, "poisson", 1e-5,
                        max_epsilon=max_epsilon)
    g_opt = rmsprop(1e-3)
    fit = fit_private(model, (images, labels), plan, (rmsprop(1e-3), g_opt), str(tmp_path), seed=0, verbose=0,
                      extra_callbacks=[Limit(max_steps=max_steps)])
    fit.update(critic_steps=fit["train_steps"], generator_steps=int(g_opt.iterations.numpy()))
    return fit, plan


def test_resume_continues_the_ledger_and_budget_stop_holds(tmp_path):
    first, plan = _fit(tmp_path, epochs=1, max_steps=4)
    assert plan.steps_per_epoch == 100  # an epoch is round(1/q) critic steps
    assert (first["steps"], first["critic_steps"], first["generator_steps"]) == (4, 4, 2)
    assert first["epsilon"] == pytest.approx(RDP.epsilon([(0.01, Z, 4)], 1e-5))
    # Resume (the stopped epoch counts as done) with a budget that allows 6 critic steps in total.
    budget = RDP.epsilon([(0.01, Z, 6)], 1e-5) * 1.0001
    second, _ = _fit(tmp_path, epochs=3, max_epsilon=budget)
    assert second["resumed"] and second["budget_reached"]
    assert (second["steps"], second["generator_steps"]) == (6, 3)
    assert second["epsilon"] == pytest.approx(RDP.epsilon([(0.01, Z, 6)], 1e-5)) and second["epsilon"] <= budget


def test_a_resumed_run_records_each_scored_step_once(tmp_path):
    """A run killed after scoring step 6 but checkpointed at step 4 resumes at 4 and scores 6 again:
    the row made before the kill is dropped at the restart (the file is rewritten then), not kept twice."""
    import json
    import types

    import tensorflow as tf

    path = tmp_path / "progress.json"
    path.write_text(json.dumps([{"critic_steps": s, "seconds": float(s)} for s in (2, 4, 6)]))
    monitor = Monitor(1e-5, 1, None, True, str(path), every_steps=2)
    monitor.set_model(types.SimpleNamespace(step_count=tf.Variable(4), epsilon=lambda delta: 0.5))
    monitor.on_train_begin()
    assert [r["critic_steps"] for r in json.loads(path.read_text())] == [2, 4]
    monitor.model.step_count.assign(6)
    monitor.on_train_batch_end(0)
    assert [r["critic_steps"] for r in json.loads(path.read_text())] == [2, 4, 6]
