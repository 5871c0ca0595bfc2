/** A file of the web console: its name under `/console/`, its media type and its text. */
export interface Asset {
  readonly name: string
  readonly contentType: string
  readonly text: string
}

export const html = (name: string, text: string): Asset => ({ name, contentType: "text/html; charset=utf-8", text })
export const css = (name: string, text: string): Asset => ({ name, contentType: "text/css; charset=utf-8", text })
export const js = (name: string, text: string): Asset => ({ name, contentType: "text/javascript; charset=utf-8", text })
