import DatongRuntime
import Gateway

await ServiceMain.run(name: "bridge-gateway") { reader, runtime in
    buildGatewayApplication(settings: try GatewaySettings(reader), runtime: runtime)
}
