// The display page: reads /api/v1/... only, plots with Plotly.js (shipped beside this file).
"use strict";

const state = {
  status: null, dump: null, follow: true, pol: "xx", quantity: "coherence",
  chanLo: 0, chanHi: null, sel: null, busy: false, shown: null,
};
const $ = (id) => document.getElementById(id);
const PLOT = { responsive: true, displaylogo: false };

async function api(endpoint, params = {}) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined) query.set(k, v);
  const response = await fetch(`api/v1/${endpoint}?${query}`, { cache: "no-store" });
  const body = await response.json();
  if (!response.ok) throw new Error(`${endpoint}: ${body.error}`);
  return body;
}

function showError(text) { $("error").textContent = text || ""; }
const mhz = (hz) => hz.map((f) => (f === null ? null : f / 1e6));

async function poll() {
  let status;
  try {
    status = await api("status");
  } catch (err) {
    $("status").textContent = String(err.message || err);
    return;
  }
  state.status = status;
  $("stale").hidden = !status.stale;
  const last = status.dumps - 1;
  const when = status.time_unix ? new Date(status.time_unix * 1000).toISOString() : "–";
  $("status").textContent = `${status.source}: ${status.dumps} dumps` +
    (status.nants ? `, ${status.nants} antennas, ${status.nfreq} channels` : "") +
    `, latest ${when}` + (status.source === "live" ? `, sequence ${status.sequence}` : "");
  if (status.stale) {
    $("stale").textContent = `no dump for ${Math.round(status.seconds_since_last_dump)} s`;
  }
  if (status.dumps === 0 || status.nants === undefined) return;
  const slider = $("dump");
  slider.min = status.first_dump;
  slider.max = last;
  if (state.sel === null) {
    const ants = status.antennas;
    state.sel = { ant1: ants[0], ant2: ants[Math.min(1, ants.length - 1)], pol: "xx" };
  }
  if (state.chanHi === null) { state.chanHi = status.nfreq; $("chan-hi").value = status.nfreq; }
  if (state.follow || state.dump === null || state.dump < status.first_dump) state.dump = last;
  slider.value = state.dump;
  await refresh();
}

async function refresh(force = false) {
  if (state.busy || state.dump === null || !state.sel) return;
  const key = JSON.stringify([state.dump, state.sel, state.pol, state.quantity,
                              state.chanLo, state.chanHi, state.status.dumps]);
  if (!force && key === state.shown) return;
  state.busy = true;
  try {
    $("dump-label").textContent = `${state.dump}`;
    await Promise.all([drawMatrix(), drawSpectrum(), drawWaterfall(), drawAutos(), drawHealth()]);
    state.shown = key;
    showError("");
  } catch (err) {
    showError(String(err.message || err));
  } finally {
    state.busy = false;
  }
}

async function drawMatrix() {
  const m = await api("matrix", { pol: state.pol, dump: state.dump, chan_lo: state.chanLo,
                                  chan_hi: state.chanHi, quantity: state.quantity });
  const labels = m.antennas.map(String);
  const phase = state.quantity === "phase";
  Plotly.react("matrix", [{
    type: "heatmap", x: labels, y: labels, z: m[state.quantity],
    colorscale: phase ? "Phase" : "Viridis", zmin: phase ? -Math.PI : undefined,
    zmax: phase ? Math.PI : undefined,
    hovertemplate: "ant1 %{y} ant2 %{x}: %{z:.4g}<extra></extra>",
  }], {
    title: { text: `${state.quantity}, ${m.pol}, channels ${m.chan_lo}–${m.chan_hi - 1}`,
             font: { size: 13 } },
    margin: { t: 30, l: 45, r: 10, b: 40 },
    xaxis: { type: "category", title: "ant2" },
    yaxis: { type: "category", title: "ant1", autorange: "reversed" },
  }, PLOT);
  const gd = $("matrix");
  if (!gd.dataset.clicks) {
    gd.dataset.clicks = "1";
    gd.on("plotly_click", (ev) => {
      const p = ev.points[0];
      state.sel = { ant1: Number(p.y), ant2: Number(p.x), pol: state.pol };
      refresh(true);
    });
  }
}

async function drawSpectrum() {
  const s = state.sel;
  const b = await api("baseline", { ant1: s.ant1, ant2: s.ant2, pol: s.pol, dump: state.dump });
  const amp = b.re.map((re, i) => Math.hypot(re, b.im[i]));
  const phase = b.re.map((re, i) => Math.atan2(b.im[i], re));
  const f = mhz(b.freq_hz);
  $("selected").textContent = `baseline ${b.ant1}–${b.ant2} ${b.pol}`;
  Plotly.react("spectrum", [
    { x: f, y: amp, name: "amplitude", mode: "lines+markers" },
    { x: f, y: phase, name: "phase (rad)", mode: "lines+markers", yaxis: "y2" },
  ], {
    title: { text: `${b.ant1}–${b.ant2} ${b.pol}, dump ${b.dump}${b.lost ? " (lost)" : ""}`,
             font: { size: 13 } },
    margin: { t: 30, l: 55, r: 10, b: 40 }, showlegend: false,
    grid: { rows: 2, columns: 1, pattern: "independent" },
    xaxis: { title: "frequency (MHz)", anchor: "y2" }, yaxis: { title: "amplitude", domain: [0.55, 1] },
    yaxis2: { title: "phase (rad)", domain: [0, 0.45], range: [-3.3, 3.3] },
  }, PLOT);
}

async function drawWaterfall() {
  const s = state.sel;
  const w = await api("waterfall", { ant1: s.ant1, ant2: s.ant2, pol: s.pol, dump: state.dump,
                                     last: 32 });
  const f = mhz(w.freq_hz);
  Plotly.react("waterfall", [
    { type: "heatmap", x: f, y: w.dumps, z: w.amplitude, colorscale: "Viridis",
      colorbar: { x: 0.4, len: 0.9, thickness: 12 }, xaxis: "x", yaxis: "y" },
    { type: "heatmap", x: f, y: w.dumps, z: w.phase, colorscale: "Phase", zmin: -Math.PI,
      zmax: Math.PI, xaxis: "x2", yaxis: "y2",
      colorbar: { thickness: 12 } },
  ], {
    title: { text: `amplitude | phase, last ${w.dumps.length} dumps`, font: { size: 13 } },
    margin: { t: 30, l: 45, r: 10, b: 40 },
    xaxis: { domain: [0, 0.36], title: "MHz" }, xaxis2: { domain: [0.54, 0.92], title: "MHz" },
    yaxis: { title: "dump" }, yaxis2: { anchor: "x2" },
  }, PLOT);
}

async function drawAutos() {
  const a = await api("autos", { dump: state.dump });
  const f = mhz(a.freq_hz);
  const traces = a.inputs.map((inp) => ({
    x: f, y: inp.power, mode: "lines", name: `${inp.antenna}${inp.pol}` +
      (inp.state ? ` [${inp.state}]` : ""),
    line: { width: inp.outlier || inp.state ? 2.5 : 1, color: inp.outlier ? "#c0392b" : undefined,
            dash: inp.state ? "dot" : "solid" },
    opacity: inp.outlier || inp.state ? 1 : 0.45,
  }));
  traces.push({ x: f, y: a.median, mode: "lines", name: "median",
                line: { color: "#000", width: 3, dash: "dash" } });
  Plotly.react("autos", traces, {
    title: { text: `${a.inputs.length} inputs, dump ${a.dump}`, font: { size: 13 } },
    margin: { t: 30, l: 60, r: 10, b: 40 }, showlegend: false,
    xaxis: { title: "frequency (MHz)" }, yaxis: { title: "power", type: "log" },
  }, PLOT);
  const marked = a.inputs.filter((inp) => inp.outlier || inp.state);
  $("outliers").replaceChildren(...marked.map((inp) => {
    const li = document.createElement("li");
    li.textContent = `${inp.antenna}${inp.pol}: ` + (inp.state ? inp.state : "") +
      (inp.outlier ? ` outlier (${inp.ratio === null ? "no power" : inp.ratio.toFixed(2) + "× median"})` : "");
    return li;
  }));
}

async function drawHealth() {
  const h = await api("health", { dump: state.dump });
  let traces;
  if (h.source === "live") {
    const t = h.series.map((s) => new Date(s.time_unix * 1000));
    const series = (name, key, axis) => ({
      x: t, y: h.series.map((s) => (s[key] === undefined ? null : s[key])), name, mode: "lines",
      yaxis: axis,
    });
    traces = [series("loss %", "loss_percent", "y"), series("late heaps", "late", "y2"),
              series("missing heaps", "missing", "y2"),
              series("rate / real time", "realtime_factor", "y3"),
              series("ring fill (max)", "ring_fill_max", "y3")];
  } else {
    const d = h.series.map((s) => s.dump);
    traces = [
      { x: d, y: h.series.map((s) => 100 * s.flagged_fraction), name: "flagged %", yaxis: "y" },
      { x: d, y: h.series.map((s) => s.nsamples_mean), name: "nsamples mean", yaxis: "y3" },
    ];
  }
  Plotly.react("health", traces, {
    margin: { t: 20, l: 55, r: 55, b: 40 }, legend: { orientation: "h", y: -0.15 },
    xaxis: { title: h.source === "live" ? "time" : "dump", anchor: "y3" },
    yaxis: { title: h.source === "live" ? "loss %" : "flagged %", domain: [0.55, 1],
             rangemode: "tozero" },
    yaxis2: { title: "heaps", overlaying: "y", side: "right", rangemode: "tozero" },
    yaxis3: { title: h.source === "live" ? "rate / real time, fill" : "nsamples",
              domain: [0, 0.45], rangemode: "tozero" },
  }, PLOT);
}

function wire() {
  $("dump").addEventListener("input", (ev) => {
    state.dump = Number(ev.target.value);
    state.follow = state.status && state.dump === state.status.dumps - 1 && $("follow").checked;
    if (!state.follow) $("follow").checked = false;
    refresh();
  });
  $("follow").addEventListener("change", (ev) => { state.follow = ev.target.checked; poll(); });
  $("pol").addEventListener("change", (ev) => { state.pol = ev.target.value; refresh(); });
  $("quantity").addEventListener("change", (ev) => { state.quantity = ev.target.value; refresh(); });
  $("chan-lo").addEventListener("change", (ev) => { state.chanLo = Number(ev.target.value); refresh(); });
  $("chan-hi").addEventListener("change", (ev) => { state.chanHi = Number(ev.target.value); refresh(); });
}

// Poll on the second: browsers on one service then ask for the same dump together, and the
// server computes each answer once for all of them.
function tick() {
  poll().finally(() => setTimeout(tick, 1000 - (Date.now() % 1000)));
}

window.xdisplay = state;  // for tests and the console: what is shown
wire();
tick();
