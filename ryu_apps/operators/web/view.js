// Freeway's live fabric view: draws the fabric from /api/v1/fabric, colours each directed link by its class
// (LOL, draining, HOL, shared, access, down) with its width following the measured load, lists the elephants
// from /api/v1/elephants, and highlights an elephant's path on hover. Polls every second. No build step.
// A fabric of more than DETAIL_MAX switches (or a page opened at #level=groups) starts at one tile per group
// (/api/v1/fabric?level=groups: a fat-tree's pods, blocks of 16 leaves); a tile opens its group
// (?group=NAME: its switches, hosts and links, and the top-tier switches it links to).
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
const POLL_MS = 1000;
const ROW_GAP = 110, COL_W = 46, MARGIN = 40, OFFSET = 2.2;
const DETAIL_MAX = 400;
const state = { layoutKey: null, pos: {}, links: {}, nodes: {}, hovered: null, elephants: [],
                grouped: null, group: null, tiles: {}, groupNames: null };

function el(tag, attrs, parent) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

function layout(fabric) {
  // rows from the top: the highest switch level first, hosts at the bottom
  const levels = [...new Set(fabric.switches.map(s => s.level))].sort((a, b) => b - a);
  const rows = levels.map(l => fabric.switches.filter(s => s.level === l).map(s => s.name));
  const tors = fabric.switches.filter(s => s.level === 0).map(s => s.name);
  const hosts = [...fabric.hosts].sort((a, b) => tors.indexOf(a.switch) - tors.indexOf(b.switch) || a.port - b.port);
  rows.push(hosts.map(h => h.name));
  const widest = Math.max(...rows.map(r => r.length));
  const width = 2 * MARGIN + (widest - 1) * COL_W;
  const pos = {};
  rows.forEach((row, i) => {
    const step = row.length > 1 ? (width - 2 * MARGIN) / (row.length - 1) : 0;
    row.forEach((name, j) => {
      pos[name] = { x: row.length > 1 ? MARGIN + j * step : width / 2, y: MARGIN + i * ROW_GAP, host: i === rows.length - 1 };
    });
  });
  return { pos, width, height: 2 * MARGIN + (rows.length - 1) * ROW_GAP };
}

function build(fabric) {
  const svg = document.getElementById("fabric");
  svg.replaceChildren();
  const { pos, width, height } = layout(fabric);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  state.pos = pos; state.links = {}; state.nodes = {};
  const linkLayer = el("g", { id: "links" }, svg), nodeLayer = el("g", { id: "nodes" }, svg);
  for (const ln of fabric.links) {
    const a = pos[ln.src], b = pos[ln.dst];
    if (!a || !b) continue;
    const dx = b.x - a.x, dy = b.y - a.y, len = Math.hypot(dx, dy) || 1;
    const ox = -dy / len * OFFSET, oy = dx / len * OFFSET;  // each direction on its own side
    const line = el("line", { x1: a.x + ox, y1: a.y + oy, x2: b.x + ox, y2: b.y + oy, class: "link",
                              "data-src": ln.src, "data-dst": ln.dst }, linkLayer);
    el("title", {}, line);
    state.links[`${ln.src}>${ln.dst}`] = line;
  }
  for (const sw of fabric.switches) {
    const p = pos[sw.name];
    const g = el("g", { class: "node switch", "data-name": sw.name, transform: `translate(${p.x},${p.y})` }, nodeLayer);
    el("rect", { x: -19, y: -9, width: 38, height: 18, rx: 3 }, g);
    el("text", {}, g).textContent = sw.name;
    el("title", {}, g);
    state.nodes[sw.name] = g;
  }
  for (const h of fabric.hosts) {
    const p = pos[h.name];
    const g = el("g", { class: "node host", "data-name": h.name, transform: `translate(${p.x},${p.y})` }, nodeLayer);
    el("circle", { r: 8 }, g);
    const t = el("text", { y: 18 }, g);
    t.textContent = h.name.replace(/^h/, "");
    el("title", {}, g).textContent = `${h.name} ${h.ip}`;
  }
}

function mbps(bps) { return bps == null ? "" : (bps / 1e6).toFixed(2); }

function update(fabric) {
  const key = fabric.switches.map(s => s.name).join(",") + "|" + fabric.links.length + "|" + fabric.hosts.length;
  if (key !== state.layoutKey) { build(fabric); state.layoutKey = key; }
  for (const ln of fabric.links) {
    const line = state.links[`${ln.src}>${ln.dst}`];
    if (!line) continue;
    const util = ln.utilisation == null ? 0 : Math.min(1, ln.utilisation);
    line.setAttribute("class", `link ${ln.class}` + (line.classList.contains("hl") ? " hl" : ""));
    line.setAttribute("data-class", ln.class);
    line.setAttribute("stroke-width", (1.2 + 7 * util).toFixed(2));
    line.firstChild.textContent = `${ln.src} → ${ln.dst}: ${ln.class}` +
      (ln.utilisation == null ? ", not measured" : `, ${(100 * ln.utilisation).toFixed(1)}% (${mbps(ln.bps)} Mbit/s)`) +
      (ln.counter == null ? "" : `, counter ${ln.counter}`);
  }
  for (const sw of fabric.switches) {
    const g = state.nodes[sw.name];
    if (!g) continue;
    g.setAttribute("class", `node switch ${sw.state}`);
    g.lastChild.textContent = `${sw.name} (${sw.role}, dpid ${sw.dpid}): ${sw.state}`;
  }
}

function flowText(f) {
  const proto = f.proto === 6 ? "tcp" : f.proto === 17 ? "udp" : f.proto;
  return `${f.src}:${f.sport} → ${f.dst}:${f.dport} ${proto}`;
}

function highlight(eleph) {
  const svg = document.getElementById("fabric");
  for (const line of Object.values(state.links)) line.classList.remove("hl");
  state.hovered = eleph ? eleph.id : null;
  svg.classList.toggle("highlighting", !!eleph);
  if (!eleph) return;
  for (const [a, b] of eleph.links) {
    const line = state.links[`${a}>${b}`];
    if (line) line.classList.add("hl");
  }
}

function updateElephants(elephants) {
  state.elephants = elephants;
  document.getElementById("elephant-count").textContent = `(${elephants.length})`;
  const body = document.querySelector("#elephants tbody");
  body.replaceChildren();
  for (const e of elephants) {
    const tr = document.createElement("tr");
    tr.dataset.id = e.id;
    const path = e.paths.length ? e.paths.map(p => p.join("-")).join(" | ") : "(sampled on " + e.links.length + " links)";
    for (const text of [e.id, e.how, e.flows.map(flowText).join(", "), mbps(e.allocation_bps), mbps(e.measured_bps), path]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.appendChild(td);
    }
    tr.addEventListener("mouseenter", () => { highlight(e); tr.classList.add("hl"); });
    tr.addEventListener("mouseleave", () => { highlight(null); tr.classList.remove("hl"); });
    if (state.hovered === e.id) { tr.classList.add("hl"); highlight(e); }
    body.appendChild(tr);
  }
  if (state.hovered && !elephants.some(e => e.id === state.hovered)) highlight(null);
}

// the page's address after #: token=... (a read token, never sent to the server as part of a URL),
// level=groups (start at the groups), group=NAME (open one group)
const HASH = new URLSearchParams(location.hash.slice(1));
const TOKEN = HASH.get("token");
state.group = HASH.get("group");
if (HASH.get("level") === "groups" || state.group) state.grouped = true;

async function getJSON(path) {
  const headers = TOKEN ? { Authorization: `Bearer ${TOKEN}` } : {};
  const r = await fetch(path, { cache: "no-store", headers });
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return r.json();
}

function setHash() {
  const h = new URLSearchParams();
  if (TOKEN) h.set("token", TOKEN);
  if (state.grouped) h.set("level", "groups");
  if (state.group) h.set("group", state.group);
  history.replaceState(null, "", "#" + h.toString());
}

function openGroup(group) {
  state.group = group;
  setHash();
  poll();
}

function pct(u) { return u == null ? "not measured" : `${(100 * u).toFixed(1)}%`; }

function tile(box, key, tag) {
  // one tile per group, made once and updated in place (a click is never lost to a redraw)
  let t = state.tiles[key];
  if (!t) {
    t = state.tiles[key] = document.createElement(tag);
    t.dataset.group = key;
    box.appendChild(t);
  }
  return t;
}

function setLines(t, lines) {
  while (t.children.length < lines.length) t.appendChild(document.createElement("span"));
  lines.forEach((text, i) => { t.children[i].textContent = text; });
  t.children[0].className = "name";
}

function showGroups(doc) {
  const box = document.getElementById("groups");
  const names = ["", ...doc.groups.map(g => g.group)].join(",");
  if (names !== state.groupNames) { box.replaceChildren(); state.tiles = {}; state.groupNames = names; }
  const top = tile(box, "", "div");
  const upTop = doc.top.filter(s => s.connected).length;
  top.className = "group top" + (upTop < doc.top.length ? " bad" : "");
  top.textContent = `top tier: ${upTop}/${doc.top.length} switches connected`;
  for (const g of doc.groups) {
    const t = tile(box, g.group, "button");
    if (!t.onclick) t.onclick = () => openGroup(g.group);
    const connected = g.states.connected || 0;
    const bad = g.links_down > 0 || connected < g.switches || g.lldp_problems > 0;
    t.className = "group" + (bad ? " bad" : "");
    t.dataset.linksDown = String(g.links_down);
    t.style.setProperty("--load", String(Math.min(1, g.utilisation_max || 0)));
    setLines(t, [g.group, `${connected}/${g.switches} switches, ${g.hosts} hosts`,
                 `${g.links_down} of ${g.links} links down` + (g.lldp_problems ? `, ${g.lldp_problems} LLDP` : ""),
                 `busiest ${pct(g.utilisation_max)}` + (g.hottest ? ` (${g.hottest})` : ""),
                 `up ${mbps(g.up_bps)} Mbit/s`]);
  }
}

function showLevel() {
  const grouped = state.grouped && !state.group;
  document.getElementById("groups").hidden = !grouped;
  document.getElementById("fabric").style.display = grouped ? "none" : "";
  document.getElementById("back").hidden = !(state.grouped && state.group);
  document.getElementById("where").textContent = !state.grouped ? "" : state.group ? `group ${state.group}` : "all groups";
}

async function poll() {
  const status = document.getElementById("status");
  try {
    const st = await getJSON("api/v1/status");
    if (state.grouped === null) state.grouped = st.fabric.switches > DETAIL_MAX;
    const path = !state.grouped ? "api/v1/fabric" : state.group ? `api/v1/fabric?group=${encodeURIComponent(state.group)}`
      : "api/v1/fabric?level=groups";
    const [fabric, el] = await Promise.all([getJSON(path), getJSON("api/v1/elephants")]);
    showLevel();
    if (fabric.level === "groups") showGroups(fabric); else update(fabric);
    updateElephants(el.elephants);
    const cl = st.cluster ? ` · ${st.cluster.node} is ${st.cluster.role} (leader ${st.cluster.leader || "none yet"}, generation ${st.cluster.generation}${st.cluster.store_ok ? "" : ", store unreachable"})` : "";
    status.textContent = `mode ${st.mode}${st.isolation ? " + isolation" : ""} · ${st.switches_connected}/${st.fabric.switches} switches connected · ${st.links_down} links down · ${el.elephants.length} elephants${cl}`;
    status.classList.remove("error");
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
  } catch (err) {
    status.textContent = `cannot reach the controller: ${err.message}`;
    status.classList.add("error");
  }
}

document.getElementById("back").addEventListener("click", () => openGroup(null));
poll();
setInterval(poll, POLL_MS);
