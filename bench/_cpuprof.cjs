// Preloaded with `NODE_OPTIONS=--require .../_cpuprof.cjs` (Node 20 refuses --cpu-prof there):
// samples this process's JavaScript from start to exit into $CPU_PROFILE_DIR/<pid>.cpuprofile.
const inspector = require("node:inspector")
const fs = require("node:fs")
const path = require("node:path")
const session = new inspector.Session()
session.connect()
session.post("Profiler.enable")
session.post("Profiler.setSamplingInterval", { interval: 250 })
session.post("Profiler.start")
process.on("exit", () => {
  session.post("Profiler.stop", (error, result) => {
    if (error === null) fs.writeFileSync(path.join(process.env.CPU_PROFILE_DIR, `${process.pid}.cpuprofile`), JSON.stringify(result.profile))
  })
})
