/**
 * `chat.js`: the Chat page, streaming through `/v1/chat/completions` (`stream: true`). The
 * thought channel (`reasoning_content`) goes into a collapsible part of the reply; the usage line
 * says the reuse kind and the first-token time. Enter sends (Shift+Enter is a new line), Escape
 * or the Stop button aborts the fetch, which cancels the generation on the server. Each chat is
 * one conversation key (`X-Nativegen-Conversation`), so a turn continues the last one's cache.
 */
import { js } from "./Asset.js"

export const chatPage = js(
  "chat.js",
  String.raw`
import { errorMessage, events, json, request } from "./api.js"
import { fill, h, millis, rate } from "./dom.js"

function newKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(8))
  return "console-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")
}

/**
 * Appends a channel's text to an element as it streams, without the line breaks at its edges
 * (Qwen3 writes "<think>\n...\n</think>\n\nanswer"): leading ones are dropped, trailing ones
 * held back until more of the channel follows.
 */
function channel(element) {
  let started = false
  let held = ""
  return (text) => {
    let next = held + text
    if (!started) next = next.replace(/^\s+/, "")
    const trailing = /\s*$/.exec(next)[0]
    held = trailing
    next = next.slice(0, next.length - trailing.length)
    if (next !== "") {
      started = true
      element.append(next)
    }
  }
}

function usageLine(usage, extra, finish, clientFirstToken) {
  const parts = []
  if (usage) {
    const cached = usage.prompt_tokens_details?.cached_tokens ?? 0
    parts.push(usage.prompt_tokens + " prompt tokens (" + cached + " reused" + (extra?.reuse ? ", " + extra.reuse : "") + ")")
    parts.push(usage.completion_tokens + " generated")
  } else if (extra?.reuse) parts.push("reuse " + extra.reuse)
  const firstToken = extra?.first_token_ms ?? clientFirstToken
  if (firstToken !== undefined) parts.push("first token " + millis(firstToken))
  if (extra?.decode_tokens_per_second) parts.push(rate(extra.decode_tokens_per_second) + " tokens/s")
  if (finish) parts.push(finish)
  return parts.join(" · ")
}

export function mount(root) {
  let history = []
  let conversation = newKey()
  let controller = null
  let model = undefined

  const log = h("div", { class: "messages", role: "log", "aria-label": "Conversation" })
  const input = h("textarea", { id: "chat-input", name: "message", rows: 3, placeholder: "Ask something (Enter sends, Shift+Enter for a new line)" })
  const send = h("button", { type: "submit", text: "Send" })
  const stop = h("button", { type: "button", class: "secondary", text: "Stop", disabled: true, "aria-keyshortcuts": "Escape" })
  const clear = h("button", { type: "button", class: "secondary", text: "New chat" })
  const think = h("input", { type: "checkbox", id: "chat-think", checked: true })
  const maxTokens = h("input", { type: "number", id: "chat-max-tokens", min: 1, max: 32768, value: "256" })
  const temperature = h("input", { type: "number", id: "chat-temperature", min: 0, max: 2, step: 0.1, value: "0" })
  const extra = h("textarea", { id: "chat-extra", rows: 2, spellcheck: false, placeholder: "{\"top_p\": 0.9, \"stop\": [\"END\"]}" })
  const notice = h("p", { class: "error", role: "status", "aria-live": "polite" })
  const form = h("form", { class: "stack", "aria-label": "Send a message" },
    h("div", { class: "field" }, h("label", { for: "chat-input", text: "Message" }), input),
    h("div", { class: "row" }, send, stop, clear),
    h("details", {},
      h("summary", { text: "Options" }),
      h("div", { class: "stack" },
        h("div", { class: "row" },
          h("div", { class: "field" }, h("label", { for: "chat-max-tokens", text: "Max tokens" }), maxTokens),
          h("div", { class: "field" }, h("label", { for: "chat-temperature", text: "Temperature" }), temperature),
          h("div", {}, think, " ", h("label", { for: "chat-think", text: "Think first" }))),
        h("div", { class: "field" }, h("label", { for: "chat-extra", text: "More request fields (a JSON object)" }), extra))),
    notice)

  /** The extra request fields, or a message saying why they are not a JSON object. */
  const extraFields = () => {
    const text = extra.value.trim()
    if (text === "") return {}
    try {
      const fields = JSON.parse(text)
      if (fields !== null && typeof fields === "object" && !Array.isArray(fields)) return fields
    } catch {}
    return "More request fields must be a JSON object"
  }

  fill(root, h("h1", { tabindex: -1, text: "Chat" }), log, form)

  json("/nativegen/status").then((status) => {
    model = status.readiness.roles.find((r) => r.role === "generation")?.model
  }, (error) => fill(notice, error.message))

  const streaming = (on) => {
    send.disabled = on
    stop.disabled = !on
    log.setAttribute("aria-busy", on ? "true" : "false")
  }

  const stopNow = () => {
    if (controller !== null) controller.abort()
  }

  const submit = async () => {
    const text = input.value.trim()
    if (text === "" || controller !== null) return
    const fields = extraFields()
    if (typeof fields === "string") {
      fill(notice, fields)
      extra.closest("details").open = true
      extra.focus()
      return
    }
    fill(notice)
    input.value = ""
    const turn = history
    turn.push({ role: "user", content: text })
    const asked = h("div", { class: "message user" }, h("div", { class: "who", text: "You" }), h("div", { class: "text", text }))
    log.append(asked)
    const thoughtText = h("div", { class: "text thought" })
    const thoughts = h("details", { hidden: true }, h("summary", { text: "Thoughts" }), thoughtText)
    const answer = h("div", { class: "text answer" })
    const usage = h("div", { class: "usage" })
    const reply = h("div", { class: "message assistant" }, h("div", { class: "who", text: model ?? "Assistant" }), thoughts, answer, usage)
    log.append(reply)
    const showThought = channel(thoughtText)
    const showAnswer = channel(answer)
    controller = new AbortController()
    streaming(true)
    const started = performance.now()
    let clientFirstToken = undefined
    let content = ""
    let finish = undefined
    let extra = undefined
    let totals = undefined
    try {
      const response = await request("/v1/chat/completions", {
        method: "POST",
        signal: controller.signal,
        headers: { "content-type": "application/json", "x-nativegen-conversation": conversation },
        body: JSON.stringify({
          ...(model === undefined ? {} : { model }),
          messages: turn,
          stream: true,
          stream_options: { include_usage: true },
          max_tokens: Number(maxTokens.value) || 256,
          temperature: Number(temperature.value) || 0,
          chat_template_kwargs: { enable_thinking: think.checked },
          ...fields
        })
      })
      if (!response.ok) throw new Error(await errorMessage(response))
      for await (const { data } of events(response)) {
        if (data === "[DONE]") break
        if (data?.error) throw new Error(data.error.message ?? String(data.error))
        const choice = data.choices?.[0]
        const delta = choice?.delta ?? {}
        if (delta.reasoning_content || delta.content) clientFirstToken ??= performance.now() - started
        if (delta.reasoning_content) {
          thoughts.hidden = false
          showThought(delta.reasoning_content)
        }
        if (delta.content) {
          content += delta.content
          showAnswer(delta.content)
        }
        if (choice?.finish_reason) finish = choice.finish_reason
        if (data.nativegen) extra = data.nativegen
        if (data.usage) totals = data.usage
      }
      fill(usage, usageLine(totals, extra, finish, clientFirstToken))
      turn.push({ role: "assistant", content })
    } catch (error) {
      if (controller.signal.aborted) {
        fill(usage, usageLine(undefined, undefined, "stopped", clientFirstToken))
        turn.push({ role: "assistant", content })
      } else {
        fill(notice, error.message)
        if (content === "") {
          // Nothing came back: the message goes back into the box to send again.
          turn.pop()
          asked.remove()
          reply.remove()
          input.value = text
        } else turn.push({ role: "assistant", content })
      }
    } finally {
      controller = null
      streaming(false)
      input.focus()
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault()
    submit()
  })
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault()
      form.requestSubmit()
    }
  })
  stop.addEventListener("click", stopNow)
  clear.addEventListener("click", () => {
    stopNow()
    history = []
    conversation = newKey()
    fill(log)
    fill(notice)
    input.focus()
  })
  const onKey = (event) => {
    if (event.key === "Escape" && controller !== null) {
      event.preventDefault()
      stopNow()
    }
  }
  document.addEventListener("keydown", onKey)
  return () => {
    stopNow()
    document.removeEventListener("keydown", onKey)
  }
}
`
)
