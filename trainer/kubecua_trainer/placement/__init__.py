"""Which processes of a run generate and which learn (placement.py, spec.trainer.placement), and
what each process builds under the disaggregated placement (disaggregated.py)."""
