"""Hyperparameter tuning under one privacy budget: the keras-tuner job and its accounting
(`tuner.py`: `TuningJob`, the job's epsilon), what is searched and how a trial is scored (`space.py`:
the space's rules, `Objective`, a family's `--tune` defaults `FamilyTuning`), the released copy of
the best trial (`best_run.py`), where the trials' output goes (`console.py`), and `PrivateTuner` for a
user's own `make_private` model (`private_tuner.py`). The cost of tuning (Papernot & Steinke's bound) is engine maths:
`tfpriv.privacy.tuning`."""
