"""How the engine gets the learner's weights: one WeightSync per engine (weight_sync.py), and the
disaggregated placement's broadcast from learners to generators (weight_broadcast.py)."""
