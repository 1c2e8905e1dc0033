// The causality audit's verdict on a run page (docs/robustness.md). Placeholder until built.
function auditBadge(_run) {
  return null;
}
