import DatongContracts
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

/// The Sensors config downloads (docs/PROTOCOL.md section 5) through the gateway, on the host and any
/// path prefix SDKs upload to, with the documents published in config-service.
@Suite("bridge-gateway: SDK config downloads")
struct SDKConfigTests {
    static let admin: HTTPFields = [.authorization: "Bearer \(RunningServices.adminToken)"]

    private func publish(_ services: RunningServices, _ kind: String, _ query: String, _ body: String) async throws {
        let answer = try await services.config.execute(
            uri: "/v1/projects/default/\(kind)?\(query)", method: .put, headers: Self.admin,
            body: ByteBuffer(string: body))
        #expect(answer.status == .created)
    }

    @Test("remote config: defaults with version 0 until one is published, then the published switches; 304 when v is current")
    func remoteConfig() async throws {
        try await RunningServices.run { services in
            let gateway = services.gateway
            let empty = try await gateway.execute(uri: "/api/config/iOS.conf?project=default&app_id=com.example.shop", method: .get)
            #expect(empty.status == .ok)
            let defaults = try empty.json()
            #expect(defaults["v"] as? String == "0")
            #expect((defaults["configs"] as? [String: Any])?["autoTrackMode"] as? Int == -1)
            #expect(try await gateway.execute(uri: "/config/iOS.conf?v=0", method: .get).status == .notModified)

            try await publish(services, "remote-config", "platform=ios", #"{"configs":{"disableSDK":true,"autoTrackMode":3}}"#)
            try await publish(services, "remote-config", "platform=ios&app_id=com.example.beta", #"{"configs":{"effect_mode":1}}"#)
            let published = try await gateway.execute(uri: "/api/config/iOS.conf?project=default&app_id=com.example.shop&v=0", method: .get)
            #expect(published.status == .ok)
            let answer = try published.json()
            let version = try #require(answer["v"] as? String)
            #expect(version != "0")
            let switches = try #require(answer["configs"] as? [String: Any])
            #expect(switches["disableSDK"] as? Bool == true)
            #expect(switches["autoTrackMode"] as? Int == 3)
            #expect(switches["disableDebugMode"] as? Bool == false)  // a default the document left out
            #expect(try await gateway.execute(uri: "/api/config/iOS.conf?app_id=com.example.shop&v=\(version)", method: .get).status == .notModified)

            // The most specific document wins: this app has its own.
            let beta = try await gateway.execute(uri: "/config/iOS.conf?app_id=com.example.beta", method: .get).json()
            #expect((beta["configs"] as? [String: Any])?["effect_mode"] as? Int == 1)
            // Android has nothing published: defaults.
            #expect(try await gateway.execute(uri: "/config/Android.conf", method: .get).json()["v"] as? String == "0")
            #expect(try await gateway.execute(uri: "/config/Windows.conf", method: .get).status == .notFound)
        }
    }

    @Test("visual config: 205 until published, then the events; 304 when current; JSONP for Web with a checked callback name")
    func visualConfig() async throws {
        try await RunningServices.run { services in
            let gateway = services.gateway
            #expect(try await gateway.execute(uri: "/sa/config/visualized/Android.conf?project=default", method: .get).status == .resetContent)
            let events =
                #"{"events":[{"event_name":"Buy","event_type":"appclick","event":{"element_path":"Shop/Button[0]","screen_name":"Cart"},"properties":[]}]}"#
            try await publish(services, "visual-config", "platform=web", events)
            let answer = try await gateway.execute(uri: "/h5/config/visualized/Web.conf?project=default&app_id=shop", method: .get)
            #expect(answer.status == .ok)
            let config = try answer.json()
            #expect(config["os"] as? String == "Web")
            #expect(config["project"] as? String == "default")
            #expect((config["events"] as? [[String: Any]])?.first?["event_name"] as? String == "Buy")
            let version = try #require(config["version"] as? String)
            #expect(try await gateway.execute(uri: "/config/visualized/Web.conf?v=\(version)", method: .get).status == .notModified)

            let jsonp = try await gateway.execute(uri: "/config/visualized/Web.conf?callbackName=sensors.cb_1", method: .get)
            #expect(jsonp.status == .ok)
            #expect(jsonp.headers[.contentType]?.hasPrefix("application/javascript") == true)
            #expect(jsonp.text.hasPrefix("sensors.cb_1(200, {"))
            let current = try await gateway.execute(uri: "/config/visualized/Web.conf?callbackName=cb&v=\(version)", method: .get)
            #expect(current.text == "cb(304, null)")
            for hostile in ["alert(1)", "a;b", "1cb", "a..b", String(repeating: "a", count: 65)] {
                let refused = try await gateway.execute(
                    uri: "/config/visualized/Web.conf?callbackName=\(hostile.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)", method: .get)
                #expect(refused.status == .badRequest, "\(hostile)")
            }
            #expect(try await gateway.execute(uri: "/config/visualized/iOS.conf?callbackName=cb", method: .get).status == .badRequest)
        }
    }
}
