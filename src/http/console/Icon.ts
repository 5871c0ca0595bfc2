/** The console's icon (so the browser does not ask for `/favicon.ico`). */
import type { Asset } from "./Asset.js"

export const icon: Asset = {
  name: "icon.svg",
  contentType: "image/svg+xml",
  text: String.raw`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="6" fill="#1a6bd6"/><path d="M8 24V8l16 16V8" fill="none" stroke="#fff" stroke-width="3.5" stroke-linecap="round" stroke-linejoin="round"/></svg>
`
}
