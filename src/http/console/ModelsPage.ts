/**
 * `models.js`: the Models page over `/nativegen/models`: the active models (revision, signer,
 * artifacts, which role runs each now) with a Verify button each (`POST
 * /nativegen/models/{name}/verify`), the activations passed over, and every blob.
 */
import { js } from "./Asset.js"

export const modelsPage = js(
  "models.js",
  String.raw`
import { json } from "./api.js"
import { bytes, fill, h, short, table } from "./dom.js"

function verifyResult(result) {
  return h("div", { class: result.ok ? "ok" : "bad", role: "status" },
    result.ok ? "Verified: every artifact hashes to its digest." : "Verification failed:",
    result.ok ? null : h("ul", {}, result.revisions.flatMap((r) =>
      r.artifacts.filter((a) => !a.ok).map((a) => h("li", {}, h("code", { text: short(a.digest) }), " " + a.error + ": " + a.message)))))
}

function activeModel(model) {
  const status = h("div", { "aria-live": "polite" })
  const verify = h("button", { type: "button", class: "secondary", text: "Verify " + model.model })
  verify.addEventListener("click", async () => {
    verify.disabled = true
    fill(status, h("span", { class: "muted", text: "Hashing..." }))
    try {
      fill(status, verifyResult(await json("/nativegen/models/" + encodeURIComponent(model.model) + "/verify", {})))
    } catch (error) {
      fill(status, h("span", { class: "bad", text: error.message }))
    } finally {
      verify.disabled = false
    }
  })
  return h("section", { class: "card", "data-model": model.model },
    h("h2", { text: model.model }),
    h("dl", { class: "facts" },
      h("dt", { text: "Role" }), h("dd", { text: model.role + (model.running.length > 0 ? " (running now)" : "") }),
      h("dt", { text: "Revision" }), h("dd", { text: model.revision }),
      h("dt", { text: "Device" }), h("dd", { text: model.device }),
      h("dt", { text: "Signer" }), h("dd", {}, h("code", { text: model.signer })),
      h("dt", { text: "Manifest" }), h("dd", {}, h("code", { title: model.manifestDigest, text: short(model.manifestDigest) })),
      h("dt", { text: "Activated" }), h("dd", { text: new Date(model.activatedAt).toLocaleString() + " (journal line " + model.journalLine + ")" })),
    table("Artifacts of " + model.model, [
      { label: "Digest", cell: (a) => h("code", { title: a.digest, text: short(a.digest) }) },
      { label: "Size", num: true, cell: (a) => bytes(a.size) },
      { label: "Type", cell: (a) => a.mediaType }
    ], model.artifacts),
    h("div", { class: "row" }, verify),
    status)
}

export function mount(root) {
  const body = h("div", {}, h("p", { class: "muted", text: "Loading..." }))
  fill(root, h("h1", { tabindex: -1, text: "Models" }), body)
  json("/nativegen/models").then((listing) => {
    fill(body,
      h("div", { class: "grid" }, listing.active.map(activeModel)),
      listing.passedOver.length === 0 ? null : h("section", { class: "card" },
        h("h2", { text: "Passed over" }),
        table("Activations passed over", [
          { label: "Model", cell: (p) => p.model + " revision " + p.revision },
          { label: "Why", cell: (p) => p.error + ": " + p.reason }
        ], listing.passedOver)),
      h("section", { class: "card" },
        h("h2", { text: "Blobs" }),
        table("Blobs in the store", [
          { label: "Digest", cell: (b) => h("code", { title: b.digest, text: short(b.digest) }) },
          { label: "Size", num: true, cell: (b) => bytes(b.size) },
          { label: "Referenced", cell: (b) => (b.referenced ? "yes" : "no") },
          { label: "Leased", cell: (b) => (b.leased ? "yes" : "no") }
        ], listing.blobs)))
  }, (error) => {
    fill(body, h("p", { class: error.status === 404 ? "muted" : "error", text: error.message }))
  })
  return () => {}
}
`
)
