import ConfigService
import DatongRuntime

await ServiceMain.run(name: "config-service") { reader, runtime in
    buildConfigApplication(settings: try ConfigSettings(reader), runtime: runtime)
}
