// Small SVG line charts, drawn from data with DOM calls only (no library, no innerHTML).
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#2f5fd0", "#e0532f", "#16a34a", "#9333ea", "#d97706", "#0891b2",
    "#db2777", "#4b5563", "#65a30d", "#7c3aed", "#b91c1c", "#0f766e"];

  function svg(tag, attrs, text) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function ticks(lo, hi, n) {
    const span = hi - lo;
    const raw = span / Math.max(1, n);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => span / s <= n) || raw;
    const out = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(t);
    return out;
  }

  function label(v) {
    if (v === 0) return "0";
    const a = Math.abs(v);
    if (a >= 1e4 || a < 1e-3) return v.toExponential(1);
    return String(Number(v.toPrecision(3)));
  }

  // opts: {title, xs: [number], series: [{name, values: [number|null]}], markers: [{x, label}], xLabel}
  function line(opts) {
    const W = 560, H = 230, L = 52, R = 12, T = 14, B = 30;
    const box = document.createElement("div");
    box.className = "chart card";
    const h = document.createElement("h3");
    h.textContent = opts.title;
    box.append(h);
    const xs = opts.xs || [];
    const series = (opts.series || []).filter((s) => s.values.some((v) => typeof v === "number"));
    if (!xs.length || !series.length) {
      const p = document.createElement("p");
      p.className = "muted";
      p.textContent = opts.empty || "no data yet";
      box.append(p);
      return box;
    }
    const ys = series.flatMap((s) => s.values.filter((v) => typeof v === "number"));
    let [x0, x1] = [Math.min(...xs), Math.max(...xs)];
    let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (y0 === y1) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
    const px = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
    const py = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img" });
    root.append(svg("title", {}, opts.title));
    for (const t of ticks(y0, y1, 4)) {
      root.append(svg("line", { x1: L, x2: W - R, y1: py(t), y2: py(t), stroke: "#eceff3" }));
      root.append(svg("text", { x: L - 4, y: py(t) + 3, "text-anchor": "end" }, label(t)));
    }
    for (const t of ticks(x0, x1, 6)) {
      root.append(svg("text", { x: px(t), y: H - B + 13, "text-anchor": "middle" }, label(t)));
    }
    root.append(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#98a2b3" }));
    root.append(svg("line", { x1: L, x2: L, y1: T, y2: H - B, stroke: "#98a2b3" }));
    root.append(svg("text", { x: W - R, y: H - 3, "text-anchor": "end" }, opts.xLabel || "step"));
    for (const m of opts.markers || []) {
      if (typeof m.x !== "number" || m.x < x0 || m.x > x1) continue;
      const g = svg("g", { class: "marker" });
      g.append(svg("line", { x1: px(m.x), x2: px(m.x), y1: T, y2: H - B,
        stroke: m.color || "#b42318", "stroke-dasharray": "4 3" }));
      g.append(svg("text", { x: px(m.x) + 3, y: T + 9 }, m.label));
      g.append(svg("title", {}, `step ${m.x}: ${m.label}`));
      root.append(g);
    }
    series.forEach((s, i) => {
      const color = COLORS[i % COLORS.length];
      let run = [];
      const flush = () => {
        if (run.length > 1) {
          root.append(svg("polyline", { points: run.join(" "), fill: "none", stroke: color,
            "stroke-width": 1.6 }));
        }
        run = [];
      };
      s.values.forEach((v, j) => {
        if (typeof v !== "number" || typeof xs[j] !== "number") { flush(); return; }
        run.push(`${px(xs[j]).toFixed(1)},${py(v).toFixed(1)}`);
        const dot = svg("circle", { cx: px(xs[j]), cy: py(v), r: 2.2, fill: color });
        dot.append(svg("title", {}, `${s.name} @ ${xs[j]}: ${label(v)}`));
        root.append(dot);
      });
      flush();
    });
    box.append(root);
    const legend = document.createElement("ul");
    legend.className = "legend";
    series.forEach((s, i) => {
      const li = document.createElement("li");
      const sw = document.createElement("span");
      sw.className = "swatch";
      sw.style.background = COLORS[i % COLORS.length];
      li.append(sw, document.createTextNode(s.name));
      legend.append(li);
    });
    box.append(legend);
    return box;
  }

  window.Charts = { line, COLORS };
})();
