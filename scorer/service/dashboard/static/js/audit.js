"use strict";
// The causality audit's verdict on a run page (docs/robustness.md): a badge next to the run
// title, with its evidence in the badge's tooltip and in a details block below it.

// Verdicts wear the colours of the run statuses (style.css): pass green, fail red,
// inconclusive orange.
const AUDIT_BADGE_COLOURS = { pass: "finished", fail: "failed", inconclusive: "interrupted" };

/** The badge (and its evidence) of a run's causality audit; null for a run never audited. */
function auditBadge(run) {
  const audit = run.analyses?.causality;
  if (!audit) return null;
  const headline = auditHeadline(audit);
  const lines = (audit.evidence || []).map(auditEvidenceLine);
  const badge = h(
    "span",
    {
      class: `badge ${AUDIT_BADGE_COLOURS[audit.verdict] || ""}`,
      "data-verdict": audit.verdict,
      title: [headline, ...lines.slice(0, 10)].join("\n"),
    },
    `causality: ${audit.verdict}`,
  );
  if (lines.length === 0) return h("span", { class: "audit", "data-audit": "causality" }, badge);
  // Inside the title, in plain text size (style.css), so the evidence reads as notes.
  const details = h(
    "details",
    { class: "audit-evidence" },
    h("summary", {}, headline),
    h("ul", {}, lines.map((line) => h("li", {}, line))),
  );
  return h("span", { class: "audit", "data-audit": "causality" }, badge, details);
}

function auditHeadline(audit) {
  const c = audit.counts || {};
  // Verdicts stored before the audit had repeats (audit_version 1) count A and A' apart.
  const apart = audit.rule
    ? `${fmt(c.differs)} differ between A and B, ${fmt(c.memory)} between A and A+, ` +
      `${plural(c.nondeterministic, "output")} within a group`
    : `${fmt(c.differs)} differ between A and B, ${fmt(c.nondeterministic)} between A and A'`;
  const rule = audit.rule
    ? `; rule: ${audit.rule.repeats} repeats, P(fail | honest, p ≤ ${fmt(audit.rule.p0)}) ≤ ` +
      `${audit.rule.false_accusation.toExponential(1)}`
    : "";
  return (
    `cut T = ${fmt(audit.cut_s)} s, marker ${audit.marker}: ${plural(c.points, "decision point")} ` +
    `before T compared over ${plural(c.sessions, "session")}; ${apart}, ` +
    `${fmt(c.marker)} name the marker, ${plural(c.failed_sessions, "session")} failed${rule}`
  );
}

/** `watch-count, step 3 at 5 s: A (synthetic:proactive:004, …): "2" · B (…): "3"` */
function auditEvidenceLine(evidence) {
  const where =
    evidence.video_t === null || evidence.video_t === undefined
      ? evidence.task
      : `${evidence.task}, ${evidence.point} at ${fmt(evidence.video_t)} s`;
  const said = Object.entries(evidence.outputs)
    .map(([copy, text]) => `${copy} (${evidence.sessions[copy]}): ${text}`)
    .join(" · ");
  return `${evidence.kind}: ${where}: ${said}`;
}
