/** The console's style sheet: system fonts, light and dark, wrapping layouts with no fixed widths. */
import { css } from "./Asset.js"

export const style = css(
  "style.css",
  String.raw`
:root {
  color-scheme: light dark;
  --bg: #fbfbfa;
  --fg: #1d1f21;
  --muted: #5f6368;
  --line: #d9dadc;
  --panel: #ffffff;
  --accent: #1a6bd6;
  --weights: #3b6fb6;
  --kv: #d9822b;
  --workspace: #7d5bbe;
  --free: #e4e6e8;
  --ok: #1e7d3a;
  --warn: #a15c00;
  --bad: #b3261e;
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  line-height: 1.45;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #16181b;
    --fg: #e6e6e6;
    --muted: #a0a4a8;
    --line: #34383d;
    --panel: #1e2125;
    --accent: #6aa7ff;
    --free: #2c3035;
    --ok: #5cc27a;
    --warn: #e0a040;
    --bad: #ff7b72;
  }
}
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg); }
a { color: var(--accent); }
:focus-visible { outline: 2px solid var(--accent); outline-offset: 2px; }
.skip { position: absolute; left: -10000px; }
.skip:focus { position: static; }
header.top {
  display: flex; flex-wrap: wrap; align-items: center; gap: 0.5rem 1.5rem;
  padding: 0.6rem 1rem; border-bottom: 1px solid var(--line); background: var(--panel);
}
header.top .brand { font-weight: 700; }
header.top nav ul { display: flex; flex-wrap: wrap; gap: 0.25rem 1rem; list-style: none; margin: 0; padding: 0; }
header.top nav a { text-decoration: none; padding: 0.2rem 0.1rem; }
header.top nav a[aria-current="page"] { font-weight: 700; border-bottom: 2px solid var(--accent); }
.connection { margin-left: auto; font-size: 0.85rem; color: var(--muted); }
main { padding: 1rem; max-width: 72rem; margin: 0 auto; }
h1 { font-size: 1.4rem; margin: 0 0 0.75rem; }
h1[tabindex="-1"]:focus { outline: none; }
h3 { font-size: 1rem; margin: 0 0 0.3rem; }
.grid + .grid { margin-top: 1rem; }
h2 { font-size: 1.05rem; margin: 0 0 0.5rem; }
.grid { display: grid; gap: 1rem; grid-template-columns: repeat(auto-fit, minmax(min(100%, 22rem), 1fr)); }
section.card { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: 0.8rem 1rem; min-width: 0; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 0.2rem 0.8rem; margin: 0; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; overflow-wrap: anywhere; }
.table-wrap { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; font-size: 0.92rem; }
th, td { text-align: left; padding: 0.25rem 0.5rem 0.25rem 0; border-bottom: 1px solid var(--line); vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.88em; overflow-wrap: anywhere; }
.muted { color: var(--muted); }
.state { font-weight: 700; }
.state[data-state="ready"] { color: var(--ok); }
.state[data-state="starting"], .state[data-state="loading"], .state[data-state="warming"], .state[data-state="repairing"] { color: var(--warn); }
.state[data-state="failed"], .state[data-state="stopped"] { color: var(--bad); }
.bar { display: flex; height: 1.3rem; border-radius: 4px; overflow: hidden; background: var(--free); border: 1px solid var(--line); }
.bar > span { display: block; min-width: 0; }
.bar .weights, .swatch.weights { background: var(--weights); }
.bar .kv, .swatch.kv { background: var(--kv); }
.bar .workspace, .swatch.workspace { background: var(--workspace); }
.swatch.free { background: var(--free); border: 1px solid var(--line); }
.legend { display: flex; flex-wrap: wrap; gap: 0.2rem 1rem; list-style: none; padding: 0; margin: 0.4rem 0 0; font-size: 0.88rem; }
.swatch { display: inline-block; width: 0.8rem; height: 0.8rem; border-radius: 2px; margin-right: 0.3rem; vertical-align: -0.1rem; }
ol.timeline { list-style: none; margin: 0; padding: 0; }
ol.timeline li { border-left: 3px solid var(--line); padding: 0.1rem 0 0.5rem 0.7rem; }
ol.timeline li[data-outcome="replaced"], ol.timeline li[data-outcome="fell-back"] { border-color: var(--warn); }
ol.timeline li[data-outcome="failed"], ol.timeline li[data-outcome="gave-up"] { border-color: var(--bad); }
figure.plot { margin: 0; }
figure.plot svg { width: 100%; height: auto; display: block; }
figure.plot figcaption { font-size: 0.88rem; color: var(--muted); }
svg .axis { stroke: var(--line); stroke-width: 1; }
svg .label { fill: var(--muted); font-size: 9px; }
svg .series-0 { stroke: var(--accent); fill: var(--accent); }
svg .series-1 { stroke: var(--kv); fill: var(--kv); }
svg .series-2 { stroke: var(--workspace); fill: var(--workspace); }
svg polyline { fill: none; stroke-width: 1.5; }
form.stack { display: grid; gap: 0.6rem; }
label { font-weight: 600; }
.field { display: grid; gap: 0.2rem; }
.row { display: flex; flex-wrap: wrap; gap: 0.5rem 1rem; align-items: end; }
input, textarea, select, button { font: inherit; color: inherit; }
input[type="text"], input[type="number"], input[type="password"], textarea {
  width: 100%; padding: 0.4rem 0.5rem; border: 1px solid var(--line); border-radius: 4px; background: var(--bg);
}
input[type="number"] { width: 7rem; }
textarea { resize: vertical; min-height: 4.5rem; }
button {
  padding: 0.4rem 0.9rem; border-radius: 4px; border: 1px solid var(--accent);
  background: var(--accent); color: #fff; cursor: pointer;
}
button.secondary { background: transparent; color: var(--accent); }
button:disabled { opacity: 0.5; cursor: default; }
.messages { display: grid; gap: 0.75rem; margin-bottom: 1rem; }
.message { border: 1px solid var(--line); border-radius: 6px; padding: 0.6rem 0.8rem; background: var(--panel); min-width: 0; }
.message.user { border-left: 4px solid var(--accent); }
.message .who { font-size: 0.8rem; color: var(--muted); margin-bottom: 0.2rem; }
.message .text { white-space: pre-wrap; overflow-wrap: anywhere; }
.message details { margin: 0.2rem 0 0.4rem; }
.message details .text { color: var(--muted); font-size: 0.92rem; }
.message .usage { margin-top: 0.4rem; font-size: 0.82rem; color: var(--muted); }
.error { color: var(--bad); overflow-wrap: anywhere; }
.heads { display: grid; gap: 0.5rem; }
.head-row { display: grid; gap: 0.5rem; grid-template-columns: repeat(auto-fit, minmax(min(100%, 12rem), 1fr)); align-items: end; }
.probability { display: grid; grid-template-columns: minmax(4rem, max-content) 1fr 4rem; gap: 0.5rem; align-items: center; }
.probability .track { height: 0.9rem; background: var(--free); border-radius: 3px; overflow: hidden; }
.probability .fill { height: 100%; background: var(--accent); }
.probability .value { text-align: right; font-variant-numeric: tabular-nums; }
dialog { border: 1px solid var(--line); border-radius: 6px; background: var(--panel); color: var(--fg); max-width: min(28rem, 92vw); }
dialog::backdrop { background: rgb(0 0 0 / 0.4); }
.ok { color: var(--ok); }
.bad { color: var(--bad); }
`
)
