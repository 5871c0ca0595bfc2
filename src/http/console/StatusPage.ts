/**
 * `status.js`: the Status page, live over `/nativegen/events`: the engine, each role's model, the
 * memory budget, the lanes, conversations, plots of the last generations and of memory over time,
 * and the recovery actions as a timeline.
 */
import { js } from "./Asset.js"

export const statusPage = js(
  "status.js",
  String.raw`
import { follow } from "./api.js"
import { bytes, clock, duration, fill, h, millis, rate, short, table } from "./dom.js"
import { lineChart } from "./plot.js"

/** Memory samples kept for the plot (one a second: two minutes). */
const memorySamples = 120

function card(id, title, ...children) {
  return h("section", { class: "card", id, "aria-labelledby": id + "-title" }, h("h2", { id: id + "-title", text: title }), ...children)
}

function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.filter((p) => p !== null).map(([term, value]) => [h("dt", { text: term }), h("dd", {}, value)]))
}

function engineFacts(status) {
  const { readiness } = status
  const engine = readiness.engine
  return facts([
    ["State", h("span", { class: "state", id: "engine-state", "data-state": readiness.state, text: readiness.state })],
    readiness.reason ? ["Reason", readiness.reason] : null,
    ["Incarnation", h("span", { id: "engine-incarnation", text: engine.incarnation })],
    ["Process", engine.pid === null ? "none" : h("span", { class: "mono", id: "engine-pid", text: engine.pid })],
    ["Backend", engine.backend ?? "?"],
    ["node-llama-cpp", engine.nodeLlamaCppVersion ?? "?"],
    ["Up", duration(engine.uptimeMillis)],
    ["Server", "nativegen " + status.version + (status.store ? ", model store" : ", models by path")]
  ])
}

function roles(readiness) {
  return h("div", { class: "grid" }, readiness.roles.map((r) =>
    h("div", { class: "role", "data-role": r.role },
      h("h3", {}, r.role + ": ", h("span", { class: "role-model", text: r.model })),
      facts([
        ["Revision", r.revision === null ? "loaded by path" : String(r.revision)],
        ["Context", (r.admittedContext ?? "?") + " tokens admitted of a cap of " + (r.contextCap ?? "?") + (r.limitedBy ? " (limited by " + r.limitedBy + ")" : "")],
        r.manifestDigest === null ? null : ["Manifest", h("code", { title: r.manifestDigest, text: short(r.manifestDigest) })]
      ]))))
}

function memory(readiness) {
  const budget = readiness.budget
  if (budget === null) return h("p", { class: "muted", text: "No budget yet: the engine has not reported its device." })
  const total = Math.max(budget.budgetBytes, budget.chargedBytes, 1)
  const parts = [["weights", "Weights", budget.weightsBytes], ["kv", "KV cache", budget.kvBytes], ["workspace", "Workspace", budget.workspaceBytes]]
  const bar = h("div", {
    class: "bar",
    role: "img",
    "aria-label": parts.map(([, label, n]) => label + " " + bytes(n)).join(", ") + ", free " + bytes(budget.freeBytes) + " of " + bytes(budget.budgetBytes)
  }, parts.map(([kind, label, n]) => {
    const segment = h("span", { class: kind, title: label + ": " + bytes(n) })
    segment.style.width = ((100 * n) / total).toFixed(2) + "%"
    return segment
  }))
  return [
    h("p", { text: budget.device + " (" + budget.kind + ", budget from " + (budget.source === "cap" ? "the configured cap" : "the device's free memory") + ")" }),
    bar,
    h("ul", { class: "legend" },
      parts.map(([kind, label, n]) => h("li", {}, h("span", { class: "swatch " + kind }), label + " " + bytes(n))),
      h("li", {}, h("span", { class: "swatch free" }), "Free " + bytes(budget.freeBytes))),
    h("p", { class: "muted", id: "memory-summary", text: bytes(budget.chargedBytes) + " charged of " + bytes(budget.budgetBytes) + (budget.waiting > 0 ? "; " + budget.waiting + " waiting for workspace" : "") })
  ]
}

function lanes(readiness) {
  const scheduler = readiness.scheduler
  const rows = scheduler.lanes ?? [{ lane: "all", running: scheduler.running, queued: scheduler.queued }]
  return [
    table("Lanes", [
      { label: "Lane", cell: (l) => l.lane },
      { label: "Running", num: true, cell: (l) => l.running },
      { label: "Queued", num: true, cell: (l) => l.queued }
    ], rows),
    facts([
      ["Running", h("span", { id: "scheduler-running", text: scheduler.running })],
      ["Queued", h("span", { id: "scheduler-queued", text: scheduler.queued })],
      ["Slots", String(scheduler.slots)],
      ["Conversations", scheduler.conversations + " holding a slot"]
    ])
  ]
}

function generations(readiness) {
  const recent = readiness.recentGenerations ?? []
  return [
    lineChart({
      title: "Decode tokens/s, last " + recent.length + " generations",
      series: [{ label: "tokens/s", values: recent.map((g) => g.decodeTokensPerSecond) }],
      format: rate,
      xLabel: "oldest to newest"
    }),
    lineChart({
      title: "Time to first token, last " + recent.length + " generations",
      series: [{ label: "first token", values: recent.map((g) => g.firstTokenMillis) }],
      format: millis,
      xLabel: "oldest to newest"
    })
  ]
}

function memoryOverTime(samples) {
  const budget = samples.length === 0 ? undefined : samples[samples.length - 1].budget
  return lineChart({
    title: "Memory charged" + (budget === undefined ? "" : " (budget " + bytes(budget) + ")") + ", last " + samples.length + " samples",
    series: [
      { label: "charged", values: samples.map((m) => m.charged) },
      { label: "workspace", values: samples.map((m) => m.workspace) }
    ],
    format: bytes,
    xLabel: "one a second"
  })
}

function timeline(readiness) {
  const actions = [...readiness.recoveryActions].reverse()
  if (actions.length === 0) return h("p", { class: "muted", text: "Nothing repaired or passed over since the start." })
  return h("ol", { class: "timeline", id: "recovery-actions" }, actions.map((a) =>
    h("li", { "data-outcome": a.outcome, "data-kind": a.kind },
      h("div", {}, h("time", { datetime: a.at, text: clock(a.at) }), " ", h("strong", { text: a.kind }), " ", h("span", { class: "muted", text: a.outcome })),
      h("div", { text: a.reason }))))
}

export function mount(root, { setConnection }) {
  const controller = new AbortController()
  const sections = {
    engine: h("div", {}, h("p", { class: "muted", text: "Connecting..." })),
    roles: h("div"),
    memory: h("div"),
    lanes: h("div"),
    generations: h("div"),
    memoryOverTime: h("div"),
    timeline: h("div")
  }
  fill(root,
    h("h1", { tabindex: -1, text: "Status" }),
    h("div", { class: "grid" },
      card("engine", "Engine", sections.engine),
      card("memory", "Memory budget", sections.memory),
      card("lanes", "Lanes and conversations", sections.lanes),
      card("recovery", "Recovery actions", sections.timeline)),
    h("div", { class: "grid" }, card("roles", "Models", sections.roles)),
    h("div", { class: "grid" },
      card("generations", "Last generations", sections.generations),
      card("memory-time", "Memory over time", sections.memoryOverTime)))

  const samples = []
  const render = (status) => {
    const readiness = status.readiness
    if (readiness.budget !== null) {
      const budget = readiness.budget
      samples.push({ charged: budget.chargedBytes, workspace: budget.workspaceBytes, budget: budget.budgetBytes })
      if (samples.length > memorySamples) samples.shift()
    }
    fill(sections.engine, engineFacts(status))
    fill(sections.roles, roles(readiness))
    fill(sections.memory, memory(readiness))
    fill(sections.lanes, lanes(readiness))
    fill(sections.generations, generations(readiness))
    fill(sections.memoryOverTime, memoryOverTime(samples))
    fill(sections.timeline, timeline(readiness))
  }
  follow("/nativegen/events", ({ data }) => {
    if (data?.object === "nativegen.status") render(data)
  }, setConnection, controller.signal)
  return () => controller.abort()
}
`
)
