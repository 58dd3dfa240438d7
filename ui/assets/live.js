// Keeps the queues, dead-letters and proxy pages live. Every value is
// written with textContent: names, IDs and errors are data, never markup.
"use strict";
const status = document.getElementById("status");

function td(tr, text, key) {
  const c = document.createElement("td");
  c.textContent = text;
  if (key) c.dataset.k = key;
  tr.appendChild(c);
  return c;
}

function lag(ms) {
  if (ms < 1000) return (Math.round(ms / 100) / 10) + "s";
  const s = ms / 1000;
  if (s < 60) return s.toFixed(1) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + Math.round(s % 60) + "s";
  return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
}

function ms(t) {
  return t ? new Date(t).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "–";
}

const keys = ["due", "scheduled", "leased", "dying", "done", "dead", "canceled", "throughput"];

function renderQueues(st) {
  const body = document.querySelector("#queues tbody");
  if (!body) return;
  const seen = new Set();
  for (const q of st.queues) {
    seen.add(q.name);
    let tr = [...body.rows].find(r => r.dataset.queue === q.name);
    if (!tr) {
      // A new queue: a row without the pause button (reload for it).
      tr = document.createElement("tr");
      tr.dataset.queue = q.name;
      const a = document.createElement("a");
      a.href = "jobs?queue=" + encodeURIComponent(q.name);
      a.textContent = q.name;
      td(tr, "").appendChild(a);
      for (const k of keys) td(tr, "", k);
      td(tr, "", "lag");
      td(tr, "", "paused");
      body.appendChild(tr);
      for (const r of [...body.rows]) if (r.classList.contains("none")) r.remove();
    }
    for (const k of keys) {
      const c = tr.querySelector('[data-k="' + k + '"]');
      if (!c) continue;
      const a = c.querySelector("a");
      (a || c).textContent = String(q[k]);
    }
    tr.querySelector('[data-k="lag"]').textContent = lag(q.lagMs);
    tr.querySelector('[data-k="paused"]').textContent = q.paused ? "paused" : "running";
  }
}

function renderRedrives(st) {
  const body = document.querySelector("#redrives tbody");
  if (!body || !st.redrives.length) return;
  body.replaceChildren();
  for (const r of st.redrives) {
    const tr = document.createElement("tr");
    td(tr, r.source);
    td(tr, ms(r.started));
    td(tr, String(r.rate));
    td(tr, String(r.moved));
    td(tr, String(r.skipped));
    td(tr, r.running ? "running" : r.error ? "failed: " + r.error : "finished");
    body.appendChild(tr);
  }
}

function renderProxies(st) {
  const body = document.querySelector("#proxies tbody");
  body.replaceChildren();
  for (const p of st.proxies) {
    const tr = document.createElement("tr");
    for (const v of [p.name, p.kind, p.listen, p.upstream, p.total, p.accepted, p.rejected, p.down, p.dropped, p.failed, p.peak, p.in_flight])
      td(tr, String(v));
    td(tr, p.requests == null ? "–" : String(p.requests));
    td(tr, p.attempts_per_request == null ? "–" : p.attempts_per_request.toFixed(2));
    td(tr, (p.faults || []).join("; "));
    body.appendChild(tr);
  }
  status.textContent = st.error ? st.error : "live";
}

if (document.getElementById("proxies")) {
  const poll = () => fetch("api/proxy").then(r => r.json()).then(renderProxies)
    .catch(() => { status.textContent = "reconnecting…"; });
  setInterval(poll, 2000);
} else {
  const es = new EventSource("events/queues");
  es.onopen = () => { status.textContent = "live"; };
  es.onerror = () => { status.textContent = "reconnecting…"; };
  es.onmessage = e => {
    const st = JSON.parse(e.data);
    renderQueues(st);
    renderRedrives(st);
    if (st.error) status.textContent = st.error;
  };
}
