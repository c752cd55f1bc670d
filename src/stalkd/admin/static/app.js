// stalkd dashboard: polls the admin API every POLL_MS and redraws; no framework, no build step.
"use strict";

const POLL_MS = 1000;
const HISTORY = 120; // samples kept for the charts (2 minutes at 1 s)
const PAGE = 100; // tubes per page: the server chooses them (sort, search), so any tube can be found

// A token given as #token=... is kept for this tab and removed from the address bar.
const hashToken = new URLSearchParams(location.hash.slice(1)).get("token");
if (hashToken) { sessionStorage.setItem("stalkd-token", hashToken); history.replaceState(null, "", location.pathname); }
const token = sessionStorage.getItem("stalkd-token");

const $ = (sel) => document.querySelector(sel);
const fmt = (n) => (n >= 10000 ? (n / 1000).toFixed(n >= 100000 ? 0 : 1) + "k" : String(Math.round(n)));
const rate = (n) => (n >= 100 ? fmt(n) : n.toFixed(n >= 10 ? 0 : 1));
const bytes = (n) => { const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0; while (n >= 1024 && i < 4) { n /= 1024; i++; } return n.toFixed(i ? 1 : 0) + " " + u[i]; };
const age = (s) => (s < 60 ? s + "s" : s < 3600 ? Math.floor(s / 60) + "m" : s < 86400 ? Math.floor(s / 3600) + "h" : Math.floor(s / 86400) + "d");
// A y axis of 4 steps: each step 1, 2 or 5 x 10^k (whole for job counts), so no two of its
// labels read the same (a top of 1 gave "1, 1, 1, 0, 0"). Returns [top, labels from top down].
function axis(max, whole, label) {
  let step = Math.max(max, 1e-9) / 4;
  const p = 10 ** Math.floor(Math.log10(step));
  step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= step * 0.999);
  if (whole) step = Math.max(1, Math.round(step));
  return [step * 4, [4, 3, 2, 1, 0].map((i) => label(step * i))];
}
const axisRate = (n) => (n >= 100 ? fmt(n) : n >= 10 || Number.isInteger(n) ? String(Math.round(n)) : String(+n.toFixed(2)));
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(data.error || r.status + " " + r.statusText);
  return data;
}

// --- state ---------------------------------------------------------------------------------
const state = { prev: null, series: { put: [], del: [], ready: [] }, tubeSeries: new Map(), tubeRate: new Map(),
  showInternal: localStorage.getItem("stalkd.showInternal") === "1", last: null,
  offset: 0, sort: localStorage.getItem("stalkd.tubeSort") || "created", q: "" };
// stalkd's own tubes (stalkd.failed, stalkd.key.*) are marked internal by the server: left out
// of the table (internal=0), the cards and the chart unless the "internal tubes" toggle is on.
// The cards and the chart sum every tube (the server's totals), not only the page shown.
function totals(ov) {
  const t = ov.totals || { other: {}, internal: {} };
  const pick = (k) => (t.other[k] || 0) + (state.showInternal ? t.internal[k] || 0 : 0);
  return { put: pick("puts"), del: pick("deletes"), ready: pick("ready"), buried: pick("buried"),
    jobs: pick("ready") + pick("reserved") + pick("delayed") + pick("buried") };
}

function sample(ov) {
  const prev = state.prev;
  const dt = prev ? Math.max(0.001, ov.time - prev.time) : 0;
  const now = totals(ov);
  if (prev && dt > 0) {
    const before = totals(prev);
    // total_jobs restarts when a tube is dropped and made again: never show a negative rate
    push(state.series.put, Math.max(0, (now.put - before.put) / dt));
    push(state.series.del, Math.max(0, (now.del - before.del) / dt));
    const old = new Map(prev.tubes.map((t) => [t.name, t]));
    for (const t of ov.tubes) {
      const o = old.get(t.name);
      const r = o ? Math.max(0, (t.total_jobs - o.total_jobs) / dt) : 0;
      state.tubeRate.set(t.name, r);
      if (!state.tubeSeries.has(t.name)) state.tubeSeries.set(t.name, []);
      push(state.tubeSeries.get(t.name), t.ready + t.reserved + t.delayed + t.buried);
    }
  }
  push(state.series.ready, now.ready);
  state.prev = ov;
}
function push(arr, v) { arr.push(v); if (arr.length > HISTORY) arr.shift(); }

// --- drawing -------------------------------------------------------------------------------
function chart() {
  const c = $("#chart"), dpr = window.devicePixelRatio || 1;
  const w = c.clientWidth, h = 160;
  c.width = w * dpr; c.height = h * dpr;
  const g = c.getContext("2d");
  g.scale(dpr, dpr);
  g.clearRect(0, 0, w, h);
  const pad = { l: 44, r: 48, t: 8, b: 18 };
  const { put, del, ready } = state.series;
  const [max, rateLabels] = axis(Math.max(1, ...put, ...del), false, axisRate);
  const [maxReady, readyLabels] = axis(Math.max(1, ...ready), true, fmt);
  const css = getComputedStyle(document.documentElement);
  g.strokeStyle = "#26313d"; g.fillStyle = "#7f8c99"; g.font = "11px system-ui, sans-serif"; g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = pad.t + ((h - pad.t - pad.b) * i) / 4;
    g.beginPath(); g.moveTo(pad.l, y + 0.5); g.lineTo(w - pad.r, y + 0.5); g.stroke();
    g.fillStyle = "#7f8c99"; g.fillText(rateLabels[i], 6, y + 4);
    g.fillStyle = "#f0b44c"; g.fillText(readyLabels[i], w - pad.r + 6, y + 4);
  }
  g.fillStyle = "#7f8c99";
  g.fillText("-2 min", pad.l, h - 4);
  g.fillText("now", w - pad.r - 20, h - 4);
  const x = (i, n) => pad.l + ((w - pad.l - pad.r) * (HISTORY - n + i)) / (HISTORY - 1);
  const line = (arr, top, color, fill) => {
    if (arr.length < 2) return;
    const y = (v) => pad.t + (h - pad.t - pad.b) * (1 - v / top);
    g.beginPath();
    arr.forEach((v, i) => (i ? g.lineTo(x(i, arr.length), y(v)) : g.moveTo(x(i, arr.length), y(v))));
    g.strokeStyle = color; g.lineWidth = 2; g.stroke();
    if (fill) {
      g.lineTo(x(arr.length - 1, arr.length), y(0)); g.lineTo(x(0, arr.length), y(0)); g.closePath();
      g.globalAlpha = 0.12; g.fillStyle = color; g.fill(); g.globalAlpha = 1;
    }
  };
  line(ready, maxReady, css.getPropertyValue("--rdy").trim(), false);
  line(put, max, css.getPropertyValue("--put").trim(), true);
  line(del, max, css.getPropertyValue("--del").trim(), true);
}

function spark(arr) {
  const w = 120, h = 24;
  if (!arr || arr.length < 2) return `<svg width="${w}" height="${h}"></svg>`;
  const max = Math.max(1, ...arr);
  const pts = arr.map((v, i) => `${((w * i) / (HISTORY - 1) + w - (w * (arr.length - 1)) / (HISTORY - 1)).toFixed(1)},${(h - 2 - ((h - 4) * v) / max).toFixed(1)}`);
  return `<svg width="${w}" height="${h}"><polyline fill="none" stroke="#4fb3ff" stroke-width="1.5" points="${pts.join(" ")}"/></svg>`;
}

function render(ov) {
  const s = ov.server;
  // role (a fenced former primary says so) and, when not ready, why (docs/standby.md)
  const rep = ov.replication || {};
  $("#server-role").textContent = rep.role ? `${rep.role}, epoch ${rep.epoch}` : "";
  $("#server-state").textContent = ov.ready ? "ready" : "not ready";
  $("#server-state").title = (ov.why || []).join("; ");
  $("#server-why").textContent = ov.ready ? "" : (ov.why || []).join("; ");
  $("#server-state").style.color = ov.ready ? "#5fd38d" : "#ff7a6b";
  $("#updated").textContent = "updated " + new Date(ov.time * 1000).toLocaleTimeString();
  const tubes = ov.tubes;
  const sum = totals(ov);
  $("#c-jobs").textContent = fmt(sum.jobs);
  const last = (a) => (a.length ? a[a.length - 1] : 0);
  $("#c-put-rate").textContent = rate(last(state.series.put));
  $("#c-del-rate").textContent = rate(last(state.series.del));
  $("#c-conns").textContent = fmt(s.connections);
  $("#c-conns-sub").textContent = `${s.workers} workers, ${s.waiting} waiting, ${s.producers} producers`;
  const buried = sum.buried;
  $("#c-buried").textContent = fmt(buried);
  $("#c-buried").classList.toggle("nonzero", buried > 0);
  if (ov.fsync) {
    $("#c-fsync").textContent = ov.fsync.count ? (1000 * ov.fsync.seconds / ov.fsync.count).toFixed(2) + " ms" : "–";
    $("#c-disk").textContent = `WAL ${bytes(ov.disk.wal)}, snapshots ${bytes(ov.disk.snapshot)}`;
  } else {
    $("#c-fsync").textContent = "in memory";
  }
  const hidden = state.showInternal ? 0 : (ov.totals ? ov.totals.internal.tubes : 0);
  $("#internal-hidden").textContent = hidden ? `(${hidden} hidden)` : "";
  $("#tube-range").textContent = !ov.tubes_total ? (state.q ? "no tube matches" : "no tubes")
    : `${fmt(ov.offset + 1)}–${fmt(ov.offset + tubes.length)} of ${fmt(ov.tubes_total)}`;
  $("#tube-prev").disabled = ov.offset === 0;
  $("#tube-next").disabled = ov.next === null || ov.next === undefined;
  const rows = tubes.map((t) => `
    <tr data-tube="${esc(t.name)}">
      <td class="name">${esc(t.name)}${t.paused ? `<span class="badge">paused ${t.pause_left}s</span>` : ""}</td>
      <td class="n ready-n">${fmt(t.ready)}</td><td class="n">${fmt(t.reserved)}</td>
      <td class="n">${fmt(t.delayed)}</td><td class="n buried-n ${t.buried ? "nonzero" : ""}">${fmt(t.buried)}</td>
      <td class="n">${t.waiting}</td><td class="n">${rate(state.tubeRate.get(t.name) || 0)}</td>
      <td>${spark(state.tubeSeries.get(t.name))}</td>
      <td class="actions">
        ${t.buried ? `<button data-act="kick-tube">kick buried</button>` : ""}
        ${t.paused ? `<button data-act="resume">resume</button>` : `<button data-act="pause">pause</button>`}
      </td>
    </tr>`);
  $("#tubes tbody").innerHTML = rows.join("");
  chart();
}

function renderBuried(data) {
  const jobs = state.showInternal ? data.jobs : data.jobs.filter((j) => !j.internal);
  $("#buried-empty").classList.toggle("hidden", jobs.length > 0);
  $("#buried-count").textContent = jobs.length ? `showing ${jobs.length}` : "";
  $("#buried tbody").innerHTML = jobs.map((j) => `
    <tr data-id="${j.id}" data-tube="${esc(j.tube)}">
      <td class="n"><a class="job" data-act="view">${j.id}</a></td><td>${esc(j.tube)}</td>
      <td class="error-cell" title="${esc(j.error || "")}">${esc(j.error || j.body)}</td>
      <td class="n">${j.attempts ?? j.buries}</td><td class="n">${age(j.age)}</td>
      <td class="actions"><button data-act="kick">kick</button><button data-act="move">move</button><button class="danger" data-act="delete">delete</button></td>
    </tr>`).join("");
}

function renderWorkers(data) {
  const ws = data.workers;
  $("#workers-empty").classList.toggle("hidden", ws.length > 0);
  $("#workers-count").textContent = ws.length ? `${ws.length} process${ws.length > 1 ? "es" : ""}` : "";
  $("#workers tbody").innerHTML = ws.map((w) => `
    <tr data-pid="${esc(w.pid)}">
      <td>${esc(w.host)}</td><td class="n">${esc(w.pid)}</td><td>${esc(w.mode)}</td>
      <td class="n">${w.jobs.length} / ${esc(w.slots)}</td><td>${esc((w.tubes || []).join(", "))}</td>
      <td class="jobs-cell">${w.jobs.map((j) => `<a class="job" data-act="view" data-id="${esc(j.id)}">${esc(j.id)}</a> ${esc(j.task)} ${age(Math.floor(j.running_s))}`).join("<br>")}</td>
    </tr>`).join("");
}

// --- actions -------------------------------------------------------------------------------
function confirmDialog(title, text, extra) {
  return new Promise((resolve) => {
    $("#confirm-title").textContent = title;
    $("#confirm-text").textContent = text;
    $("#confirm-extra").innerHTML = extra || "";
    $("#confirm").classList.remove("hidden");
    const input = $("#confirm-extra input");
    if (input) input.focus();
    const done = (ok) => {
      $("#confirm").classList.add("hidden");
      $("#confirm-ok").onclick = $("#confirm-cancel").onclick = null;
      resolve(ok ? (input ? input.value : true) : null);
    };
    $("#confirm-ok").onclick = () => done(true);
    $("#confirm-cancel").onclick = () => done(false);
  });
}

function toast(msg) {
  const t = $("#toast");
  t.textContent = msg; t.classList.remove("hidden");
  clearTimeout(toast.timer); toast.timer = setTimeout(() => t.classList.add("hidden"), 3500);
}

function summary(out) {
  return Object.entries(out.outcomes).map(([k, v]) => `${v} ${k.replace("_", " ")}`).join(", ") || "nothing to do";
}

async function act(kind, id, tube) {
  try {
    if (kind === "kick") {
      if (await confirmDialog("Kick job " + id + "?", "It goes back to ready in " + tube + " and a worker will run it again.") === null) return;
      toast(summary(await api("POST", "/api/v1/jobs/kick", { ids: [id] })));
    } else if (kind === "delete") {
      if (await confirmDialog("Delete job " + id + "?", "The job and its body are gone for good.") === null) return;
      toast(summary(await api("POST", "/api/v1/jobs/delete", { ids: [id] })));
    } else if (kind === "move") {
      const to = await confirmDialog("Move job " + id + "?", "Put it into another tube (it gets a new id and keeps its state).", '<input type="text" placeholder="destination tube">');
      if (!to) return;
      toast(summary(await api("POST", "/api/v1/jobs/move", { ids: [id], to })));
    } else if (kind === "kick-tube") {
      if (await confirmDialog("Kick every buried job of " + tube + "?", "They go back to ready and workers will run them again.") === null) return;
      toast(summary(await api("POST", "/api/v1/jobs/kick", { tube, state: "buried" })));
    } else if (kind === "pause") {
      const s = await confirmDialog("Pause " + tube + "?", "No job is reserved from it until the pause ends.", '<input type="number" min="1" value="60"> seconds');
      if (!s) return;
      await api("POST", "/api/v1/tubes/" + encodeURIComponent(tube) + "/pause", { seconds: parseInt(s, 10) });
      toast(tube + " paused for " + s + "s");
    } else if (kind === "resume") {
      await api("POST", "/api/v1/tubes/" + encodeURIComponent(tube) + "/pause", { seconds: 0 });
      toast(tube + " resumed");
    } else if (kind === "view") {
      return showJob(id);
    }
    $("#job-view").classList.add("hidden");
    refresh();
  } catch (e) {
    toast("Failed: " + e.message);
  }
}

async function showJob(id) {
  const j = await api("GET", "/api/v1/jobs/" + id);
  $("#job-title").textContent = `Job ${j.id} in ${j.tube}`;
  const f = [["state", j.state], ["priority", j.pri], ["age", age(j.age)], ["ttr", j.ttr + "s"], ["delay", j.delay + "s"],
    ["reserves", j.reserves], ["releases", j.releases], ["buries", j.buries], ["kicks", j.kicks], ["timeouts", j.timeouts],
    ["size", bytes(j.size)], ["time left", j.time_left + "s"]];
  $("#job-fields").innerHTML = f.map(([k, v]) => `<dt>${k}</dt><dd>${esc(v)}</dd>`).join("");
  $("#job-body").textContent = j.body + (j.truncated ? "\n…" : "");
  const dl = j.dead_letter;
  $("#job-letter").classList.toggle("hidden", !dl);
  if (dl) { $("#job-error").textContent = `${dl.task}: ${dl.error} (attempt ${dl.attempts})`; $("#job-tb").textContent = dl.traceback; }
  const acts = [];
  if (j.state === "buried" || j.state === "delayed") acts.push('<button data-act="kick">kick</button>');
  if (j.state !== "reserved") acts.push('<button data-act="move">move</button><button class="danger" data-act="delete">delete</button>');
  $("#job-actions").innerHTML = acts.join("");
  $("#job-actions").dataset.id = j.id; $("#job-actions").dataset.tube = j.tube;
  $("#job-view").classList.remove("hidden");
}

document.addEventListener("click", (ev) => {
  const b = ev.target.closest("[data-act]");
  if (b) {
    const row = b.closest("[data-id],[data-tube]");
    const id = row && row.dataset.id ? parseInt(row.dataset.id, 10) : null;
    act(b.dataset.act, id, row ? row.dataset.tube : null);
  } else if (ev.target.closest("[data-close]") || ev.target.id === "job-view") {
    $("#job-view").classList.add("hidden");
  }
});
document.addEventListener("keydown", (ev) => { if (ev.key === "Escape") { $("#job-view").classList.add("hidden"); $("#confirm-cancel").click(); } });

// --- polling -------------------------------------------------------------------------------
let busy = false, again = false;
async function refresh() {
  if (busy) { again = true; return; } // a page asked meanwhile is read once this one is drawn
  busy = true;
  try {
    const q = new URLSearchParams({ offset: state.offset, limit: PAGE, sort: state.sort, q: state.q,
      internal: state.showInternal ? "1" : "0" });
    const [ov, buried, workers] = await Promise.all([api("GET", "/api/v1/overview?" + q),
      api("GET", "/api/v1/buried?limit=50"), api("GET", "/api/v1/workers")]);
    if (ov.offset > 0 && ov.offset >= ov.tubes_total) { // the tubes shrank under this page
      state.offset = Math.max(0, Math.floor((ov.tubes_total - 1) / PAGE) * PAGE);
      again = true;
    }
    sample(ov);
    render(ov);
    renderBuried(buried);
    renderWorkers(workers);
  } catch (e) {
    $("#server-state").textContent = "unreachable: " + e.message;
    $("#server-state").style.color = "#ff7a6b";
  } finally {
    busy = false;
    if (again) { again = false; refresh(); }
  }
}
// a new search, order or page is asked at once, not at the next poll
function repage(offset) { state.offset = Math.max(0, offset); refresh(); }
$("#show-internal").checked = state.showInternal;
$("#show-internal").addEventListener("change", (ev) => {
  state.showInternal = ev.target.checked;
  localStorage.setItem("stalkd.showInternal", state.showInternal ? "1" : "0");
  repage(0);
});
$("#tube-sort").value = state.sort;
$("#tube-sort").addEventListener("change", (ev) => {
  state.sort = ev.target.value;
  localStorage.setItem("stalkd.tubeSort", state.sort);
  repage(0);
});
let typing = null;
$("#tube-search").addEventListener("input", (ev) => {
  clearTimeout(typing);
  typing = setTimeout(() => { state.q = ev.target.value.trim(); repage(0); }, 250);
});
$("#tube-prev").addEventListener("click", () => repage(state.offset - PAGE));
$("#tube-next").addEventListener("click", () => repage(state.offset + PAGE));
refresh();
setInterval(refresh, POLL_MS);
window.addEventListener("resize", chart);
