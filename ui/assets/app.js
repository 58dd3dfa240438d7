// Renders the dependencies with textContent only: names and reasons are
// data, never markup.
"use strict";
const body = document.querySelector("#deps tbody");
const status = document.getElementById("status");
const history = new Map(); // name -> {t, v: attempts/s}, last hour (bounded)
const keep = 3600;

function fmt(x, digits) { return x < 0 ? "–" : x.toFixed(digits); }

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function spark(points) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", "160");
  svg.setAttribute("height", "24");
  const max = Math.max(1, ...points);
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", points.map((v, i) =>
    (i * 160 / Math.max(1, points.length - 1)).toFixed(1) + "," + (23 - v * 22 / max).toFixed(1)).join(" "));
  svg.appendChild(line);
  return svg;
}

function render(deps) {
  body.replaceChildren();
  if (!deps.length) {
    const tr = document.createElement("tr");
    tr.className = "none";
    const td = cell(tr, "no policy registered: a service registers its policies with Dashboard.Hooks (stagger ui alone has none)");
    td.colSpan = 9;
    body.appendChild(tr);
  }
  for (const d of deps) {
    const h = history.get(d.name) || [];
    if (d.now.t && (!h.length || h[h.length - 1].t < d.now.t)) h.push({t: d.now.t, v: d.now.attemptsPerSec});
    if (h.length > keep) h.splice(0, h.length - keep);
    history.set(d.name, h);
    const tr = document.createElement("tr");
    cell(tr, d.name);
    cell(tr, fmt(d.now.attemptsPerSec, 1));
    cell(tr, fmt(d.now.retriesPerSec, 1));
    cell(tr, d.now.amplification ? d.now.amplification.toFixed(2) : "–");
    cell(tr, Object.entries(d.giveUps).map(([r, n]) => r + " " + n).join(", ") || "–");
    cell(tr, d.now.level < 0 ? "–" : (100 * d.now.level).toFixed(0) + "%");
    cell(tr, d.now.state || "–", d.now.state);
    cell(tr, d.now.limit < 0 ? "–" : d.now.inFlight + " / " + d.now.limit);
    cell(tr, "").appendChild(spark(h.map(p => p.v)));
    body.appendChild(tr);
  }
}

fetch("api/dependencies").then(r => r.json()).then(deps => {
  for (const d of deps) history.set(d.name, (d.history || []).map(s => ({t: s.t, v: s.attemptsPerSec})));
  const es = new EventSource("events");
  es.onopen = () => { status.textContent = "live"; };
  es.onerror = () => { status.textContent = "reconnecting…"; };
  es.onmessage = e => render(JSON.parse(e.data));
});
