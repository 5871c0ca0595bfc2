/** Every file of the web console: the page at `/` and the files under `/console/`. */
import { api } from "./Api.js"
import { app } from "./App.js"
import type { Asset } from "./Asset.js"
import { chatPage } from "./ChatPage.js"
import { decidePage } from "./DecidePage.js"
import { dom } from "./Dom.js"
import { icon } from "./Icon.js"
import { modelsPage } from "./ModelsPage.js"
import { page } from "./Page.js"
import { plot } from "./Plot.js"
import { statusPage } from "./StatusPage.js"
import { style } from "./Style.js"

export { page }

export const assets: ReadonlyArray<Asset> = [style, icon, app, api, dom, plot, statusPage, chatPage, decidePage, modelsPage]
