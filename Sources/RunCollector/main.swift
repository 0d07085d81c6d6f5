import Collector
import DatongRuntime

await ServiceMain.run(name: "collector") { reader, runtime in
    buildCollectorApplication(settings: try CollectorSettings(reader), runtime: runtime)
}
