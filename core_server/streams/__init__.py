"""What one session plays: the causal timeline built from a record (timeline.py), the plan
that binds a record, its timeline and its frames (plan.py), and the seeded perturbations of
a robustness run (perturb_spec.py names them, perturb.py applies them to a timeline).

May import: errors, frames, benchmark.
"""
