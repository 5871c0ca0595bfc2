/**
 * `decide.js`: the Decide page: a prompt and decision heads (a name and its labels) sent to
 * `POST /nativegen/decide`; each head's labels come back ranked, with a probability bar each.
 */
import { js } from "./Asset.js"

export const decidePage = js(
  "decide.js",
  String.raw`
import { json } from "./api.js"
import { fill, h, millis } from "./dom.js"

let rowCount = 0

function headRow(name, labels, onRemove) {
  const n = ++rowCount
  const nameInput = h("input", { type: "text", id: "head-name-" + n, value: name, required: true })
  const labelsInput = h("input", { type: "text", id: "head-labels-" + n, value: labels, required: true })
  const row = h("div", { class: "head-row" },
    h("div", { class: "field" }, h("label", { for: nameInput.id, text: "Head" }), nameInput),
    h("div", { class: "field" }, h("label", { for: labelsInput.id, text: "Labels (comma-separated)" }), labelsInput),
    h("div", {}, h("button", { type: "button", class: "secondary", text: "Remove head", onclick: () => onRemove(row) })))
  row.read = () => ({
    name: nameInput.value.trim(),
    labels: labelsInput.value.split(",").map((l) => l.trim()).filter((l) => l !== "")
  })
  return row
}

function probability(head, label) {
  const percent = (100 * label.probability).toFixed(1)
  const fillBar = h("div", { class: "fill" })
  fillBar.style.width = percent + "%"
  return h("div", { class: "probability", "data-label": label.label },
    h("span", { text: label.label }),
    h("div", {
      class: "track",
      role: "meter",
      "aria-label": head + ": " + label.label,
      "aria-valuemin": 0,
      "aria-valuemax": 100,
      "aria-valuenow": percent
    }, fillBar),
    h("span", { class: "value", text: percent + "%" }))
}

export function mount(root) {
  const prompt = h("textarea", { id: "decide-prompt", rows: 3, required: true }, "I loved every minute of this film.")
  const heads = h("div", { class: "heads" })
  const remove = (row) => {
    row.remove()
    heads.querySelector("input")?.focus()
  }
  heads.append(headRow("sentiment", "positive, negative, neutral", remove))
  const add = h("button", { type: "button", class: "secondary", text: "Add head" })
  add.addEventListener("click", () => {
    const row = headRow("", "", remove)
    heads.append(row)
    row.querySelector("input").focus()
  })
  const submit = h("button", { type: "submit", text: "Decide" })
  const result = h("div", { id: "decide-result", "aria-live": "polite" })
  const form = h("form", { class: "stack", "aria-label": "Decide" },
    h("div", { class: "field" }, h("label", { for: "decide-prompt", text: "Prompt" }), prompt),
    heads,
    h("div", { class: "row" }, submit, add))
  fill(root, h("h1", { tabindex: -1, text: "Decide" }), form, result)

  form.addEventListener("submit", async (event) => {
    event.preventDefault()
    const request = { prompt: prompt.value, heads: [...heads.children].map((row) => row.read()) }
    submit.disabled = true
    fill(result, h("p", { class: "muted", text: "Scoring..." }))
    try {
      const decision = await json("/nativegen/decide", request)
      fill(result,
        decision.heads.map((head) =>
          h("section", { class: "card", "data-head": head.name },
            h("h2", { text: head.name }),
            [...head.labels].sort((a, b) => a.rank - b.rank).map((label) => probability(head.name, label)))),
        h("p", { class: "muted", text: decision.promptTokens + " prompt tokens, queued " + millis(decision.queueMillis) + ", " + millis(decision.totalMillis) + " in all" }))
    } catch (error) {
      fill(result, h("p", { class: "error", text: error.message }))
    } finally {
      submit.disabled = false
    }
  })
  return () => {}
}
`
)
