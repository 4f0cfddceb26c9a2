// composer-rl view: the pages. Every piece of run data reaches the DOM as text
// (textContent / createTextNode), never as markup, so a transcript cannot inject HTML.
"use strict";
(function () {
  const main = document.getElementById("main");
  const crumbs = document.getElementById("crumbs");
  const liveBadge = document.getElementById("live");
  const tokinfo = document.getElementById("tokinfo");
  const LONG = 3000; // characters of a text shown before "show all"
  const TOKENS_SHOWN = 4000; // tokens of a segment drawn before "show more"
  let source = null;
  let generation = 0; // bumped on every navigation; stale async renders check it

  // --- DOM helpers --------------------------------------------------------------------

  function el(tag, props, ...kids) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null) continue;
      if (k === "className") node.className = v;
      else if (k === "text") node.textContent = String(v);
      else if (k === "href") node.href = v; // only paths this script builds
      else if (k === "title") node.title = String(v);
      else if (k === "dataset") Object.assign(node.dataset, v);
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node[k] = v;
    }
    for (const kid of kids.flat()) {
      if (kid === undefined || kid === null || kid === false) continue;
      node.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return node;
  }

  function runPath(rid, rest, params) {
    let p = `/runs/${encodeURIComponent(rid)}${rest || ""}`;
    if (params) p += "?" + new URLSearchParams(params).toString();
    return p;
  }

  function apiPath(rid, rest, params) {
    return "/api" + runPath(rid, rest, params);
  }

  function link(href, text, props) {
    const a = el("a", { href, ...(props || {}) }, text);
    a.addEventListener("click", (e) => {
      if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
      e.preventDefault();
      navigate(href);
    });
    return a;
  }

  function fmt(v, digits) {
    if (v === null || v === undefined) return "–";
    if (typeof v !== "number") return String(v);
    if (Number.isInteger(v)) return String(v);
    return v.toFixed(digits === undefined ? 4 : digits);
  }

  function notesBox(notes) {
    if (!notes || !notes.length) return null;
    return el("ul", { className: "notes", dataset: { role: "notes" } },
      notes.map((n) => el("li", { text: n })));
  }

  function errorBox(err) {
    return el("div", { className: "error", dataset: { role: "error" } }, String(err.message || err));
  }

  // A text that may be huge (a 1 MB line): the first LONG characters, and a button for all.
  function longText(text, cls) {
    const s = String(text === undefined || text === null ? "" : text);
    const pre = el("pre", { className: cls || "" });
    if (s.length <= LONG) {
      pre.textContent = s;
      return pre;
    }
    pre.textContent = s.slice(0, LONG);
    const wrap = el("div", { className: "long" }, pre);
    const more = el("button", {
      className: "more",
      text: `show all ${s.length.toLocaleString()} characters`,
      onclick: () => { pre.textContent = s; more.remove(); },
    });
    wrap.append(el("span", { className: "muted", text: " … " }), more);
    return wrap;
  }

  async function api(path) {
    const response = await fetch(path, { headers: { accept: "application/json" } });
    let body = null;
    try { body = await response.json(); } catch (e) { body = null; }
    if (!response.ok) throw new Error((body && body.error) || `${response.status} from ${path}`);
    return body;
  }

  function setCrumbs(rid, extra) {
    crumbs.replaceChildren();
    if (!rid) return;
    crumbs.append(link(runPath(rid), rid), link(runPath(rid, "/episodes"), "episodes"));
    if (extra) crumbs.append(el("span", { className: "muted", text: extra }));
  }

  // --- live updates (Server-Sent Events) -------------------------------------------------

  function live(rid, onChange) {
    if (source) source.close();
    let last = null;
    source = new EventSource(apiPath(rid, "/events"));
    source.onopen = () => { liveBadge.className = "on"; liveBadge.textContent = "live"; };
    source.onerror = () => { liveBadge.className = ""; liveBadge.textContent = "reconnecting…"; };
    source.onmessage = (event) => {
      let snap;
      try { snap = JSON.parse(event.data); } catch (e) { return; }
      liveBadge.textContent = `live · ${snap.episodes} episodes · ${snap.steps} steps · ${snap.status}`;
      if (last !== null) onChange(snap, last);
      last = snap;
    };
  }

  function stopLive() {
    if (source) source.close();
    source = null;
    liveBadge.className = "";
    liveBadge.textContent = "";
  }

  // --- pages -----------------------------------------------------------------------------

  async function runsPage() {
    stopLive();
    setCrumbs(null);
    const runs = await api("/api/runs");
    const rows = runs.map((r) => {
      const st = r.status || {};
      return el("tr", {},
        el("td", {}, link(runPath(r.id), r.id)),
        el("td", { className: "mono", text: r.path }),
        el("td", {}, el("span", { className: `status ${st.state || ""}`, text: st.state || "?" })),
        el("td", { className: "num", text: `${fmt(st.steps_done)} / ${fmt(st.steps_planned)}` }),
        el("td", { className: "num", text: fmt(st.episodes) }),
        el("td", { text: (r.notes || []).length ? `${r.notes.length} note(s)` : "" }),
        el("td", {}, link(runPath(r.id, "/episodes"), "episodes")));
    });
    main.replaceChildren(
      el("h1", { text: "Runs" }),
      runs.length ? el("table", { dataset: { role: "runs" } },
        el("thead", {}, el("tr", {}, ["run", "path", "status", "steps", "episodes", "notes", ""]
          .map((h) => el("th", { text: h })))),
        el("tbody", {}, rows)) : el("p", { className: "muted", text: "no runs served" }));
  }

  function seriesFor(metrics, keys) {
    return keys.map((k) => ({ name: k.replace(/^reward_components\//, "reward/").replace(/^monitor_flags\//, "flag/"), values: metrics.values[k] || [] }));
  }

  function pluginMarkers(metrics) {
    return (metrics.plugin_events || []).map((e) => ({
      x: e.step,
      label: `${e.action.startsWith("remove") ? "−" : "+"}${e.name}${e.action.endsWith("_failed") ? " (failed)" : ""}`,
      color: e.action.startsWith("remove") ? "#b42318" : "#067647",
    }));
  }

  function drawCharts(box, metrics) {
    const markers = pluginMarkers(metrics);
    const charts = [];
    metrics.charts.forEach((c, i) => {
      charts.push(Charts.line({ title: c.title, xs: metrics.steps, series: seriesFor(metrics, c.keys), markers }));
      if (i === 0) {
        charts.push(Charts.line({
          title: "held-out pass@1 by policy version",
          xs: metrics.eval.map((e) => e.version),
          series: [{ name: "pass@1", values: metrics.eval.map((e) => e["pass@1"]) }],
          markers, xLabel: "version", empty: "no held-out evaluation yet (eval.jsonl)",
        }));
      }
    });
    charts.forEach((c) => c.classList.add("chart"));
    box.replaceChildren(...charts);
    const ev = metrics.plugin_events || [];
    return ev.length ? el("p", { className: "muted" }, "plugins changed mid-run: ",
      ev.map((e) => `${e.action} ${e.name} at step ${e.step}`).join("; ")) : null;
  }

  function statusBlock(info) {
    const st = info.status;
    const facts = el("dl", { className: "facts" });
    const add = (k, v) => facts.append(el("dt", { text: k }), el("dd", {}, v));
    add("status", el("span", {}, el("span", { className: `status ${st.state}`, dataset: { role: "status" }, text: st.state }), " ", st.why));
    add("path", el("span", { className: "mono", text: info.path }));
    add("steps", `${fmt(st.steps_done)} of ${fmt(st.steps_planned)}`);
    add("episodes", fmt(st.episodes));
    add("checkpoints", st.checkpoints.length ? `steps ${st.checkpoints.join(", ")}` : "none");
    const p = info.plugins;
    if (p) {
      add("plugins", p.registered.join(", ") || "none");
      if (Object.keys(p.runtime_added).length) add("added mid-run", Object.keys(p.runtime_added).join(", "));
      if (p.runtime_removed.length) add("removed mid-run", p.runtime_removed.join(", "));
    }
    const cfg = info.config || {};
    const loop = cfg.loop || {};
    if (cfg.loop) {
      add("loop", `group size ${fmt(loop.group_size)}, ${fmt(loop.groups_per_step)} groups/step, ` +
        `max off-policy ${fmt(loop.max_off_policy_steps)}, drop constant ${fmt(loop.drop_constant_groups)}${loop.sync ? ", sync" : ""}`);
    }
    if (cfg.model) add("model", el("span", { className: "mono", text: cfg.model }));
    return el("div", { className: "card" }, facts);
  }

  async function runPage(rid) {
    const g = generation;
    setCrumbs(rid);
    const head = el("div");
    const chartsBox = el("div", { className: "charts", dataset: { role: "charts" } });
    const eventsLine = el("div");
    main.replaceChildren(el("h1", { text: `Run ${rid}` }), head, el("h2", { text: "Curves" }), eventsLine, chartsBox);
    let configOpen = false;
    async function render() {
      const [info, metrics] = await Promise.all([api(apiPath(rid)), api(apiPath(rid, "/metrics"))]);
      if (g !== generation) return;
      const details = el("details", { ontoggle: (e) => { configOpen = e.target.open; } },
        el("summary", { text: "config.toml (as resolved)" }), longText(info.config_text || "(none)"));
      details.open = configOpen;
      head.replaceChildren(...[notesBox(info.notes), statusBlock(info), details,
        el("p", {}, link(runPath(rid, "/episodes"), `browse ${fmt(info.status.episodes)} episodes →`))].filter(Boolean));
      const line = drawCharts(chartsBox, metrics);
      eventsLine.replaceChildren(...(line ? [line] : []));
    }
    await render();
    live(rid, (snap, last) => {
      if (snap.steps !== last.steps || snap.episodes !== last.episodes || snap.status !== last.status || snap.evals !== last.evals) {
        render().catch((e) => head.prepend(errorBox(e)));
      }
    });
  }

  const COLUMNS = [
    ["index", "#", true], ["episode", "episode", true], ["group", "group", false],
    ["template", "template", false], ["category", "category", true], ["difficulty", "diff.", true],
    ["reward", "reward", true], ["solved", "solved", true], ["flags", "flags", false],
    ["turns", "turns", true], ["tokens", "tokens", true], ["step", "step", true],
    ["versions", "versions", false], ["lag", "lag", true],
  ];
  const FILTERS = ["template", "category", "solved", "flag", "reward_min", "reward_max",
    "lag_min", "lag_max", "step_min", "step_max", "q", "group"];

  function cell(row, key, rid) {
    const v = row[key];
    switch (key) {
      case "episode": return el("td", { className: "id", title: v }, link(runPath(rid, "/episode", { id: v }), v));
      case "group": return el("td", { className: "id", title: v }, v ? link(runPath(rid, "/group", { id: v }), v) : "");
      case "solved": return el("td", { className: row.reward === null ? "muted" : v ? "yes" : "no", text: row.reward === null ? "no reward" : v ? "yes" : "no" });
      case "flags": return el("td", {}, v.map((f) => el("span", { className: "flag", text: f })));
      case "versions": return el("td", { className: "num", text: v.length ? (v[0] === v[1] ? `${v[0]}` : `${v[0]}–${v[1]}`) : "–" });
      case "reward": return el("td", { className: "num", text: fmt(v) });
      default: return el("td", { className: typeof v === "number" ? "num" : "", text: fmt(v) });
    }
  }

  function option(value, label, selected) {
    const o = el("option", { value, text: label });
    if (selected) o.selected = true;
    return o;
  }

  async function episodesPage(rid) {
    const g = generation;
    setCrumbs(rid, "· episodes");
    const params = new URLSearchParams(location.search);
    const state = {};
    for (const k of FILTERS) state[k] = params.get(k) || "";
    state.sort = params.get("sort") || "index";
    state.order = params.get("order") || "asc";
    state.page = parseInt(params.get("page") || "0", 10) || 0;
    const filtersBox = el("form", { className: "filters card", dataset: { role: "filters" }, onsubmit: (e) => e.preventDefault() });
    const summary = el("span", { dataset: { role: "summary" } });
    const tableBox = el("div");
    const noteBox = el("div");
    const pager = el("div", { className: "pager" });
    main.replaceChildren(el("h1", { text: `Episodes of ${rid}` }), noteBox, filtersBox, pager, tableBox);
    let facets = null;

    function writeUrl() {
      const q = {};
      for (const k of FILTERS) if (state[k]) q[k] = state[k];
      if (state.sort !== "index") q.sort = state.sort;
      if (state.order !== "asc") q.order = state.order;
      if (state.page) q.page = String(state.page);
      history.replaceState(null, "", runPath(rid, "/episodes", q));
    }

    function buildFilters() {
      const f = facets || { templates: {}, categories: {}, flags: {} };
      const select = (key, label, opts) => el("label", {}, label, el("select", {
        name: key, onchange: (e) => { state[key] = e.target.value; state.page = 0; load(); },
      }, opts));
      const number = (key, label, step) => el("label", {}, label, el("input", {
        type: "number", name: key, step: step || "any", value: state[key],
        onchange: (e) => { state[key] = e.target.value; state.page = 0; load(); },
      }));
      const opts = (key, obj, extra) => [option("", "all", !state[key]), ...(extra || []).map(([v, l]) => option(v, l, state[key] === v)),
        ...Object.entries(obj).map(([k, n]) => option(k, `${k || "(none)"} (${n})`, state[key] === k))];
      filtersBox.replaceChildren(
        select("template", "template", opts("template", f.templates)),
        select("category", "category", opts("category", f.categories)),
        select("solved", "solved", [option("", "all", !state.solved), option("yes", "solved", state.solved === "yes"),
          option("no", "not solved", state.solved === "no"), option("unscored", "no reward (infra failed)", state.solved === "unscored")]),
        select("flag", "monitor flag", opts("flag", f.flags, [["any", "any flag"], ["none", "no flag"]])),
        number("reward_min", "reward ≥"), number("reward_max", "reward ≤"),
        number("lag_min", "lag ≥", "1"), number("lag_max", "lag ≤", "1"),
        number("step_min", "step ≥", "1"), number("step_max", "step ≤", "1"),
        el("label", {}, "episode / task contains", el("input", { type: "search", name: "q", value: state.q,
          onchange: (e) => { state.q = e.target.value; state.page = 0; load(); } })),
        el("button", { type: "button", text: "clear", onclick: () => { for (const k of FILTERS) state[k] = ""; state.page = 0; buildFilters(); load(); } }),
        summary);
    }

    async function load(withFacets) {
      writeUrl();
      const q = { sort: state.sort, order: state.order, page: String(state.page), page_size: "50" };
      for (const k of FILTERS) if (state[k]) q[k] = state[k];
      if (withFacets || !facets) q.facets = "1";
      let page;
      try {
        page = await api(apiPath(rid, "/episodes", q));
      } catch (e) {
        if (g === generation) tableBox.replaceChildren(errorBox(e));
        return;
      }
      if (g !== generation) return;
      if (page.facets) { facets = page.facets; buildFilters(); }
      noteBox.replaceChildren(...[notesBox(page.notes)].filter(Boolean));
      summary.textContent = `${page.matched.toLocaleString()} of ${page.total.toLocaleString()} episodes`;
      const pages = Math.max(1, Math.ceil(page.matched / page.page_size));
      pager.replaceChildren(
        el("button", { type: "button", text: "← prev", disabled: state.page <= 0, onclick: () => { state.page -= 1; load(); } }),
        el("span", { dataset: { role: "page" }, text: `page ${state.page + 1} of ${pages}` }),
        el("button", { type: "button", text: "next →", disabled: state.page + 1 >= pages, onclick: () => { state.page += 1; load(); } }));
      const head = el("tr", {}, COLUMNS.map(([key, label, sortable]) => {
        const th = el("th", { text: label, dataset: { key } });
        if (sortable) {
          th.classList.add("sortable");
          if (state.sort === key) th.classList.add(`sorted-${state.order}`);
          th.addEventListener("click", () => {
            if (state.sort === key) state.order = state.order === "asc" ? "desc" : "asc";
            else { state.sort = key; state.order = key === "index" ? "asc" : "desc"; }
            state.page = 0;
            load();
          });
        }
        return th;
      }));
      const body = el("tbody", {}, page.rows.map((row) => el("tr", { dataset: { episode: row.episode } },
        COLUMNS.map(([key]) => cell(row, key, rid)))));
      tableBox.replaceChildren(el("table", { dataset: { role: "episodes" } }, el("thead", {}, head), body));
    }

    buildFilters();
    await load(true);
    live(rid, (snap, last) => { if (snap.episodes !== last.episodes) load(true); });
  }

  function blockView(b, rid) {
    const kinds = { system: "system", user: "user (instruction)", assistant: "assistant",
      tool_call: "tool call", tool_result: "tool result", think: "thinking",
      summary: "self-summary (condensed context)", marker: "special token" };
    const box = el("div", { className: `block ${b.kind}`, dataset: { kind: b.kind } },
      el("div", { className: "kind", text: kinds[b.kind] || b.kind }));
    if (b.kind === "tool_call" && !b.error) {
      const args = el("dl", { className: "args" });
      for (const [k, v] of Object.entries(b.arguments)) args.append(el("dt", { text: k }), el("dd", {}, longText(v)));
      box.append(el("div", { className: "mono", text: b.tool }), args);
    } else {
      if (b.kind === "tool_call") box.append(el("div", { className: "muted", text: `malformed call: ${b.error}` }));
      box.append(longText(b.text));
    }
    if (!b.closed && b.kind !== "marker") box.append(el("div", { className: "muted", text: "(not closed: the turn was cut off here)" }));
    return box;
  }

  function transcriptView(blocks) {
    const out = [];
    let segment = 0;
    for (const b of blocks) {
      if (b.segment !== segment) {
        segment = b.segment;
        out.push(el("div", { className: "segment-break", text: `context segment ${segment}: the episode continues from a condensed context` }));
      }
      out.push(blockView(b));
    }
    return out.length ? out : [el("p", { className: "muted", text: "empty transcript" })];
  }

  function showTokInfo(span) {
    const i = span.dataset;
    tokinfo.hidden = false;
    tokinfo.textContent = span.classList.contains("ctx")
      ? `context token ${JSON.stringify(span.textContent)} (not sampled by the policy)`
      : `token ${JSON.stringify(span.textContent)} · version ${i.version} · logprob ${i.logprob}`;
  }

  function tokenSegment(seg) {
    const box = el("div", { className: "card" });
    const versions = [...new Set(seg.versions.filter((v, j) => seg.sampled[j]))].sort((a, b) => a - b);
    box.append(el("h3", { text: `segment ${seg.segment}: ${seg.completion_tokens} tokens after a ${seg.prompt_tokens}-token context` +
      (seg.advantage !== null && seg.advantage !== undefined ? ` · advantage ${fmt(seg.advantage)}` : "") }));
    box.append(el("div", { className: "legend-v", dataset: { role: "legend" } }, "policy versions: ",
      versions.map((v) => el("span", { className: `tok v${((v % 8) + 8) % 8}`, text: ` v${v} ` }))));
    const prompt = el("details", {}, el("summary", { text: `context (${seg.prompt_tokens} tokens, not sampled)` }),
      el("div", { className: "tokens" }, seg.prompt.join("")));
    box.append(prompt);
    const area = el("div", { className: "tokens", dataset: { role: "tokens" } });
    let drawn = 0;
    function draw(upto) {
      const frag = document.createDocumentFragment();
      for (; drawn < Math.min(upto, seg.text.length); drawn++) {
        const j = drawn;
        const sampled = seg.sampled[j] !== false;
        const v = seg.versions[j];
        const lp = seg.logprobs[j];
        const span = el("span", {
          className: sampled ? `tok v${((v % 8) + 8) % 8}` : "tok ctx",
          dataset: { version: String(v), logprob: typeof lp === "number" ? lp.toFixed(4) : "–", sampled: String(sampled) },
          title: sampled ? `version ${v} · logprob ${typeof lp === "number" ? lp.toFixed(4) : "–"}` : "tool result (context)",
        });
        span.textContent = seg.text[j];
        frag.append(span);
      }
      area.append(frag);
    }
    draw(TOKENS_SHOWN);
    area.addEventListener("mouseover", (e) => { if (e.target.classList && e.target.classList.contains("tok")) showTokInfo(e.target); });
    area.addEventListener("mouseleave", () => { tokinfo.hidden = true; });
    box.append(area);
    if (seg.text.length > TOKENS_SHOWN) {
      const more = el("button", { className: "more", text: `show all ${seg.text.length} tokens`, onclick: () => { draw(seg.text.length); more.remove(); } });
      box.append(more);
    }
    if (seg.left_out) box.append(el("p", { className: "muted", text: `${seg.left_out} more tokens not sent` }));
    return box;
  }

  function componentsTable(components) {
    const entries = Object.entries(components || {});
    if (!entries.length) return el("p", { className: "muted", text: "no reward components (no reward: see grading)" });
    return el("table", { dataset: { role: "components" } }, el("tbody", {}, entries.map(([k, v]) =>
      el("tr", {}, el("td", { text: k }), el("td", { className: "num", text: fmt(v) })))));
  }

  function flagsList(flags) {
    const entries = Object.entries(flags || {});
    if (!entries.length) return el("p", { className: "muted", text: "no monitor flags" });
    return el("dl", { className: "facts", dataset: { role: "flags" } }, entries.flatMap(([k, why]) =>
      [el("dt", {}, el("span", { className: "flag", text: k })), el("dd", { text: why })]));
  }

  async function episodePage(rid) {
    const g = generation;
    const id = new URLSearchParams(location.search).get("id") || "";
    setCrumbs(rid, `· episode ${id}`);
    const data = await api(apiPath(rid, "/episode", { id }));
    if (g !== generation) return;
    const r = data.record;
    const row = data.row;
    const facts = el("dl", { className: "facts" });
    const add = (k, v) => facts.append(el("dt", { text: k }), el("dd", {}, v));
    add("task", `${fmt(r.task)} (${fmt(r.category)}, difficulty ${fmt(r.difficulty)})`);
    add("group", row.group ? link(runPath(rid, "/group", { id: row.group }), row.group) : "–");
    add("reward", el("span", { dataset: { role: "reward" }, text: fmt(r.reward) }));
    add("solved", row.reward === null ? "no reward (the infrastructure failed)" : row.solved ? "yes (hidden tests pass)" : "no");
    add("stop reason", fmt(r.stop_reason));
    add("turns / tokens", `${fmt(r.turns)} turns, ${fmt(r.generated_tokens)} generated tokens`);
    add("policy versions", `${(r.versions || []).join(", ") || "–"} (scored after step ${fmt(r.scored_after_step)}, lag ${fmt(row.lag)})`);
    add("segments", `${fmt(r.segments)} (${fmt(r.compactions)} compactions)`);
    const grading = el("div", { className: "card", dataset: { role: "grading" } }, el("h3", { text: "Grading" }));
    grading.append(el("p", {}, "grading_failure: ", el("span", { className: "mono", text: fmt(r.grading_failure) })));
    grading.append(el("p", {}, "grading_error: ", el("span", { className: "mono", text: fmt(r.grading_error) })));
    const testOut = r.test_output ?? r.tests ?? r.hidden_tests;
    grading.append(el("h3", { text: "Hidden-test output" }), testOut !== undefined
      ? longText(typeof testOut === "string" ? testOut : JSON.stringify(testOut, null, 2))
      : el("p", { className: "muted", text: "not recorded in this run's episode lines (only the verdict: solved / grading_failure)" }));
    const diff = el("div", { className: "card", dataset: { role: "diff" } }, el("h3", { text: "Diff" }),
      typeof r.diff === "string" ? longText(r.diff) : el("p", { className: "muted", text: "not recorded in this run's episode lines; the tool calls below show each edit" }));
    const summaries = (r.summaries || []).map((s, i) => el("div", { className: "block summary" },
      el("div", { className: "kind", text: `summary ${i + 1}: what the condensed context carried` }), longText(s)));
    const tokensBox = el("div", { dataset: { role: "token-view" } }, el("p", { className: "muted", text: "loading tokens…" }));
    const missing = ["reward", "components", "flags", "versions", "transcript"].filter((k) => !(k in r) && !(k === "transcript" && data.transcript !== null));
    main.replaceChildren(
      el("h1", { text: `Episode ${id}` }),
      notesBox(missing.length ? [`this episode line has no ${missing.join(", ")} (an older or damaged record)`] : []) || "",
      el("div", { className: "card" }, facts),
      el("h2", { text: "Reward by component" }), componentsTable(r.components),
      el("h2", { text: "Monitor flags" }), flagsList(r.flags),
      grading, diff,
      el("h2", { text: "Transcript" }),
      el("div", { dataset: { role: "transcript" } }, transcriptView(data.blocks)),
      summaries.length ? el("h2", { text: "Summaries (condensed context of each segment)" }) : "",
      ...summaries,
      el("h2", { text: "Tokens by policy version" }), tokensBox);
    async function loadTokens() {
      const t = await api(apiPath(rid, "/tokens", { id }));
      if (g !== generation) return false;
      tokensBox.replaceChildren(...[t.note ? el("p", { className: "muted", dataset: { role: "token-note" }, text: t.note }) : null,
        ...t.segments.map(tokenSegment)].filter(Boolean));
      return t.segments.length > 0;
    }
    const have = await loadTokens().catch((e) => { tokensBox.replaceChildren(errorBox(e)); return true; });
    if (!have) live(rid, (snap, last) => { if (snap.groups !== last.groups) loadTokens(); });
    else stopLive();
  }

  async function groupPage(rid) {
    const g = generation;
    const id = new URLSearchParams(location.search).get("id") || "";
    setCrumbs(rid, `· group ${id}`);
    const box = el("div");
    main.replaceChildren(el("h1", { text: `Group ${id}` }), box);
    async function render() {
      const data = await api(apiPath(rid, "/group", { id }));
      if (g !== generation) return;
      const cards = data.episodes.map((e) => {
        const row = e.row;
        const facts = el("dl", { className: "facts" });
        const add = (k, v) => facts.append(el("dt", { text: k }), el("dd", {}, v));
        add("reward", fmt(row.reward));
        add("advantage", el("span", { dataset: { role: "advantage" }, text: fmt(e.advantage) }));
        add("solved", row.reward === null ? "no reward" : row.solved ? "yes" : "no");
        add("versions", row.versions.length ? `${row.versions[0]}–${row.versions[1]}` : "–");
        add("flags", Object.keys(e.flags).length ? Object.keys(e.flags).map((f) => el("span", { className: "flag", text: f })) : "none");
        const assistant = e.blocks.filter((b) => !["system", "user"].includes(b.kind));
        return el("div", { className: "card", dataset: { episode: row.episode } },
          el("h3", {}, link(runPath(rid, "/episode", { id: row.episode }), row.episode)), facts,
          el("details", {}, el("summary", { text: "components" }), componentsTable(e.components)),
          el("details", {}, el("summary", { text: `transcript (${assistant.length} blocks after the instruction)` }), transcriptView(assistant)));
      });
      box.replaceChildren(...[notesBox(data.notes),
        el("div", { className: "card", dataset: { role: "fate-card", source: data.fate.source } },
          el("p", {}, "fate: ", el("span", { className: "fate", dataset: { role: "fate" }, text: data.fate.text })),
          data.fate.reason ? el("p", { dataset: { role: "fate-reason" }, text: data.fate.reason }) : null,
          el("p", { className: "muted", dataset: { role: "fate-source" }, text: data.fate.note })),
        el("div", { className: "group-grid", dataset: { role: "group" } }, cards)].filter(Boolean));
    }
    await render();
    live(rid, (snap, last) => { if (snap.steps !== last.steps || snap.episodes !== last.episodes || snap.groups !== last.groups || snap.fates !== last.fates) render(); });
  }

  // --- routing ---------------------------------------------------------------------------

  async function route() {
    generation += 1;
    tokinfo.hidden = true;
    const parts = location.pathname.split("/").filter(Boolean).map(decodeURIComponent);
    try {
      if (parts.length === 0) return await runsPage();
      if (parts[0] !== "runs") throw new Error(`no page at ${location.pathname}`);
      const rid = parts[1];
      const page = parts[2] || "";
      document.title = `${rid} · composer-rl view`;
      if (!page) return await runPage(rid);
      if (page === "episodes") return await episodesPage(rid);
      if (page === "episode") return await episodePage(rid);
      if (page === "group") return await groupPage(rid);
      throw new Error(`no page at ${location.pathname}`);
    } catch (e) {
      main.replaceChildren(errorBox(e));
    }
  }

  function navigate(href) {
    history.pushState(null, "", href);
    window.scrollTo(0, 0);
    route();
  }

  document.getElementById("home").addEventListener("click", (e) => { e.preventDefault(); navigate("/"); });
  window.addEventListener("popstate", route);
  route();
})();
