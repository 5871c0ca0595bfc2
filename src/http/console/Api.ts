/**
 * `api.js`: every request the console makes. The API key, when the server asks for one (401), is
 * asked once in a dialog, kept in sessionStorage and sent as `Authorization: Bearer` on every
 * fetch. Server-sent events are read from fetch bodies (EventSource cannot send the key).
 */
import { js } from "./Asset.js"

export const api = js(
  "api.js",
  String.raw`
import { h } from "./dom.js"

const keyName = "nativegen.apiKey"
let asking = null

function storedKey() {
  try {
    return sessionStorage.getItem(keyName)
  } catch {
    return null
  }
}

function withKey(init) {
  const headers = new Headers(init?.headers)
  const key = storedKey()
  if (key) headers.set("authorization", "Bearer " + key)
  return { ...init, headers }
}

/** Shows the key dialog (one at a time); resolves once a key is stored, rejects when dismissed. */
export function askKey(reason) {
  asking ??= new Promise((resolve, reject) => {
    const input = h("input", { type: "password", id: "api-key", name: "api-key", autocomplete: "current-password", required: true })
    const cancel = h("button", { type: "button", class: "secondary", text: "Cancel" })
    const form = h("form", { method: "dialog", class: "stack" },
      h("h2", { text: "API key" }),
      h("p", { class: "muted", text: reason }),
      h("div", { class: "field" }, h("label", { for: "api-key", text: "API key" }), input),
      h("div", { class: "row" }, h("button", { type: "submit", text: "Use key" }), cancel))
    const dialog = h("dialog", { "aria-labelledby": "api-key" }, form)
    const close = (ok) => {
      dialog.close()
      dialog.remove()
      asking = null
      if (ok) resolve()
      else reject(Object.assign(new Error("an API key is needed"), { keyDismissed: true }))
    }
    form.addEventListener("submit", (event) => {
      event.preventDefault()
      try {
        sessionStorage.setItem(keyName, input.value.trim())
      } catch {}
      close(true)
    })
    cancel.addEventListener("click", () => close(false))
    dialog.addEventListener("cancel", (event) => {
      event.preventDefault()
      close(false)
    })
    document.body.append(dialog)
    dialog.showModal()
    input.focus()
  })
  return asking
}

/** fetch with the key; a 401 asks for the key and tries again. */
export async function request(path, init) {
  for (;;) {
    const response = await fetch(path, withKey(init))
    if (response.status !== 401) return response
    const message = await errorMessage(response)
    await askKey(storedKey() ? "The key was refused: " + message : "This server needs an API key: " + message)
  }
}

/** The message of an error body in OpenAI's or Ollama's shape, else the status. */
export async function errorMessage(response) {
  try {
    const body = await response.json()
    return body?.error?.message ?? (typeof body?.error === "string" ? body.error : response.status + " " + response.statusText)
  } catch {
    return response.status + " " + response.statusText
  }
}

/** GET or POST JSON; a non-2xx answer throws with the server's message. */
export async function json(path, body, init) {
  const response = await request(path, body === undefined
    ? { ...init }
    : { ...init, method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) })
  if (!response.ok) {
    const error = new Error(await errorMessage(response))
    error.status = response.status
    throw error
  }
  return response.json()
}

/** The server-sent events of a response body: { event, data } with data parsed when it is JSON. */
export async function* events(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader()
  let buffer = ""
  let event = "message"
  let data = []
  for (;;) {
    const { done, value } = await reader.read()
    if (done) return
    buffer += value
    let newline
    while ((newline = buffer.search(/\r?\n/)) >= 0) {
      const line = buffer.slice(0, newline)
      buffer = buffer.slice(newline + (buffer[newline] === "\r" ? 2 : 1))
      if (line === "") {
        if (data.length > 0) yield { event, data: parse(data.join("\n")) }
        event = "message"
        data = []
      } else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""))
      else if (line.startsWith("event:")) event = line.slice(6).trim()
    }
  }
}

function parse(text) {
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

/**
 * Follows an event stream until signal aborts, reconnecting after a pause when it ends or fails;
 * onState(connected, why) tells the page.
 */
export async function follow(path, onEvent, onState, signal) {
  while (!signal.aborted) {
    try {
      const response = await request(path, { signal, headers: { accept: "text/event-stream" } })
      if (!response.ok) throw new Error(await errorMessage(response))
      onState(true)
      for await (const event of events(response)) onEvent(event)
      onState(false, "the server closed the stream")
    } catch (error) {
      if (signal.aborted) return
      onState(false, error.message)
      if (error.keyDismissed) return
    }
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, 1000)
      signal.addEventListener("abort", () => {
        clearTimeout(timer)
        resolve()
      }, { once: true })
    })
  }
}
`
)
