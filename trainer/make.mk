# Trainer: multi-turn GRPO for computer-use agents (trainer/kubecua_trainer), and `make demo`.
$(eval $(call python-project,trainer,trainer))
TEST_TARGETS += test-trainer
TINY_MODEL := $(KUBECUA_CACHE)/models/tiny-qwen2_5_vl

.PHONY: test-trainer demo
# The end-to-end test needs local sandboxes, the cluster tests the control plane.
test-trainer: trainer-env sandbox-env setup-go
	cd trainer && .venv/bin/pytest -q

# A tiny Qwen2.5-VL built from a config with a locally trained tokenizer (no download).
$(TINY_MODEL)/config.json: trainer/kubecua_trainer/testing/tiny_models.py | trainer-env
	trainer/.venv/bin/python -m kubecua_trainer.testing.tiny_models $(TINY_MODEL) --family qwen2_5_vl

demo: setup-apt trainer-env sandbox-env $(TINY_MODEL)/config.json ## the main job: a TrainingRun locally (tiny model, CPU, 2 Xvfb desktops); metrics on 127.0.0.1:9400
	trainer/.venv/bin/python -m kubecua_trainer run examples/trainingrun-local.yaml
