"""Hyperparameter tuning under one privacy budget: the keras-tuner job and its accounting
(`tuner.py`: `TuningJob`, objectives, the job's epsilon), a family's `--tune` defaults
(`family.py`: `FamilyTuning`), the released copy of the best trial (`best_run.py`), where the
trials' output goes (`console.py`), and `PrivateTuner` for a user's own `make_private` model
(`private_tuner.py`). The cost of tuning (Papernot & Steinke's bound) is engine maths:
`tfpriv.privacy.tuning`."""
