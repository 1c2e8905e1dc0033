// A capacity search's curve on its run page (docs/capacity.md). Placeholder until built.
function capacitySection(_run) {
  return null;
}
