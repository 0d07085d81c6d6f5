import DatongRuntime
import Identity

await ServiceMain.run(name: "identity-service") { reader, runtime in
    buildIdentityApplication(settings: try IdentitySettings(reader), runtime: runtime)
}
