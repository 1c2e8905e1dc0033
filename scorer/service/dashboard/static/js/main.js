"use strict";
// Hash routes (so the static report works from a file too), the scoring profile picker,
// and page changes.
//   #/                       runs               #/runs/ID/records/RECORD   one record
//   #/runs/ID                one run            #/runs/ID/live             live progress
//   #/compare?runs=A,B,...   comparison         #/table?runs=A,B,...     a table for a paper
// Every route takes ?profile=NAME (the scoring profile); the router adds it to a URL that
// lacks it, so the address of a view always says which numbers it shows and can be shared.

const PROFILE_KEY = "streameval.profile";
let leaving = [];
let profileNames = [];

/** Run `hook` when the page is left (stops the live view's polling). */
function onLeave(hook) {
  leaving.push(hook);
}

/** The URL's profile, else the one last chosen in this browser, else the default. */
function currentProfile() {
  if (Data.isReport) return Data.defaultProfile;
  const stored = window.localStorage.getItem(PROFILE_KEY);
  return parseHash().params.get("profile") || (profileNames.includes(stored) ? stored : Data.defaultProfile);
}

/** `hash` with its profile parameter set to `profile` (other parameters kept as written). */
function withProfile(hash, profile) {
  const [path, query = ""] = hash.replace(/^#/, "").split("?");
  const kept = query.split("&").filter((pair) => pair && !pair.startsWith("profile="));
  return `#${path || "/"}?${[...kept, `profile=${enc(profile)}`].join("&")}`;
}

/** Put the shown profile into the URL (in place: Back never leads to the URL without it),
 * the picker and this browser's memory. */
function syncProfile() {
  const profile = currentProfile();
  const hash = withProfile(window.location.hash, profile);
  if (hash !== window.location.hash) window.history.replaceState(null, "", hash);
  if (profileNames.includes(profile)) window.localStorage.setItem(PROFILE_KEY, profile);
  document.getElementById("profile").value = profile;
}

function navigate(hash) {
  if (window.location.hash === hash) route();
  else window.location.hash = hash;
}

function parseHash() {
  const raw = window.location.hash.replace(/^#/, "") || "/";
  const [path, query] = raw.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, params: new URLSearchParams(query || "") };
}

function pageFor(parts, params) {
  const [first, runId, section, recordId] = parts;
  if (Data.isReport && parts.length === 0) return (view) => runPage(view, REPORT.run.run_id);
  if (parts.length === 0) return (view) => runsPage(view, params);
  if (first === "compare" && parts.length === 1) return (view) => comparePage(view, params);
  if (first === "table" && parts.length === 1) return (view) => paperTablePage(view, params);
  if (first === "runs" && parts.length === 2) return (view) => runPage(view, runId);
  if (first === "runs" && section === "live" && parts.length === 3) return (view) => livePage(view, runId);
  if (first === "runs" && section === "records" && parts.length === 4) return (view) => recordPage(view, runId, recordId);
  return null;
}

async function route() {
  for (const hook of leaving) hook();
  leaving = [];
  if (!Data.isReport) syncProfile();
  const { parts, params } = parseHash();
  // Each page renders into its own element: a slow page left behind writes nowhere visible.
  const view = h("div", { class: "page", "data-page": parts[0] === "runs" ? (parts[2] || "run") : parts[0] || "runs" });
  view.append(h("p", { class: "muted" }, "Loading…"));
  document.getElementById("app").replaceChildren(view);
  document.title = `streameval · ${parts.join(" / ") || "runs"}`;
  for (const link of document.querySelectorAll("[data-nav]")) {
    link.classList.toggle("active", link.dataset.nav === (parts[0] === "compare" ? "compare" : "runs"));
  }
  const page = pageFor(parts, params);
  try {
    if (!page) throw new Error(`no page at #${window.location.hash.slice(1)}`);
    await page(view);
    view.setAttribute("data-ready", "true");
  } catch (error) {
    setChildren(view, errorBox(error));
    view.setAttribute("data-ready", "error");
  }
}

async function setUpProfiles() {
  const select = document.getElementById("profile");
  const profiles = await Data.profiles();
  profileNames = profiles.map((p) => p.name);
  const current = currentProfile();
  select.replaceChildren(
    ...profiles.map((p) => h("option", { value: p.name, selected: p.name === current, title: p.description }, `${p.name} v${p.version}`)),
  );
  select.disabled = Data.isReport;
  select.addEventListener("change", () => navigate(withProfile(window.location.hash, select.value)));
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", async () => {
  if (Data.isReport) document.body.classList.add("report");
  try {
    const [glossary] = await Promise.all([Data.metricHelp(), setUpProfiles()]);
    setGlossary(glossary);
  } catch (error) {
    document.getElementById("app").replaceChildren(errorBox(error));
    return;
  }
  route();
});
