// Robustness: each metric per stream perturbation next to the clean run, false alarms per hour
// on negative streams (docs/robustness.md). Placeholder until built.
function robustnessSection(_runId, _metrics) {
  return null;
}
