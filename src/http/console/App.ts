/**
 * `app.js`: the console's shell: the navigation between its pages by the URL's hash (`#/status`,
 * `#/chat`, `#/decide`, `#/models`), each page mounted into `main` and unmounted when left (its
 * streams aborted), focus moved to the new page's heading, and the live connection's state.
 */
import { js } from "./Asset.js"

export const app = js(
  "app.js",
  String.raw`
import { mount as chat } from "./chat.js"
import { mount as decide } from "./decide.js"
import { fill } from "./dom.js"
import { mount as models } from "./models.js"
import { mount as status } from "./status.js"

const pages = { status, chat, decide, models }
const main = document.getElementById("main")
const connection = document.getElementById("connection")
let unmount = () => {}

function setConnection(live, why) {
  connection.textContent = live ? "live" : "reconnecting" + (why ? ": " + why : "")
  connection.dataset.live = live ? "true" : "false"
}

function show() {
  const name = location.hash.replace(/^#\/?/, "") || "status"
  const page = pages[name] ?? status
  unmount()
  fill(connection)
  for (const link of document.querySelectorAll("nav a")) {
    if (link.getAttribute("href") === "#/" + (pages[name] ? name : "status")) link.setAttribute("aria-current", "page")
    else link.removeAttribute("aria-current")
  }
  unmount = page(main, { setConnection })
  document.title = main.querySelector("h1")?.textContent + " · nativegen"
  main.querySelector("h1")?.focus()
}

window.addEventListener("hashchange", show)
show()
`
)
